// Package idemhttptest lets a team prove its own idempotent endpoints under
// the failures that matter: a storm of concurrent duplicates, responses lost
// on the way back, a database closed under a request, and a crash and
// restart in the middle. Each helper drives a real http.Handler (the
// service's, middleware included) on a loopback server and asserts single
// execution from the service's own state: Target.Executions (or
// Service.Executions) counts what the work did, from the database or the
// provider, never from the responses.
//
// # The helpers
//
//   - Storm sends n copies of one request at once: one runs, every final
//     answer is the same bytes, the others see 409 while it is in progress.
//   - LostResponses lets the request reach the service and throws the
//     answer away, as a timeout would, then retries: the retry is a replay.
//   - CloseRestart closes the service's database while the request may be
//     in flight, opens it again on the same file and retries.
//   - KillRestart is the real crash: it runs the service in a child
//     process (the test binary re-executed), kills it with SIGKILL where
//     the service's code calls Crashpoint with the chosen name, restarts it
//     on the same file and retries with the same key.
//
// Each returns what the client saw in the end (an Answer: status, body,
// replayed; Storm one per copy) for the test's own checks, and fails the
// test when the work ran more or less than once.
//
//	func TestPayCrash(t *testing.T) {
//		idemhttptest.KillRestart(t, idemhttptest.Service{Open: openService, Request: payRequest, Executions: countCharges}, "after-charge")
//	}
//	// in the service, where a crash matters:
//	idemhttptest.Crashpoint("after-charge") // does nothing outside such a test
//
//	idemhttptest.Storm(t, idemhttptest.Target{
//		Handler:    svc.Handler,
//		Request:    func() *http.Request { return newCreateOrder("key-1") },
//		Executions: func() int { return countOrders(svc.DB) },
//	}, 50)
//
// # Caveats
//
// Crashpoint is a no-op outside a KillRestart child armed with its name,
// so it can stay in production code; in such a child it kills the process
// at once (SIGKILL, or TerminateProcess on Windows): no deferred function
// runs, nothing is flushed or closed. The child reaches the parent over
// loopback only, and every helper is bounded in time and retries.
package idemhttptest
