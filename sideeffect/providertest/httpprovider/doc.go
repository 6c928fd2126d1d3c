// Package httpprovider is a payment provider for tests and examples: an
// HTTP API that charges once per Idempotency-Key, persists charges in its
// own bbolt file, answers status by key, and injects the faults that
// matter — failing before charging, and charging then dropping the
// connection without answering.
//
// # The model
//
// Server is the provider's side (Handler serves POST /v1/charges, GET
// /v1/charges/{key} and GET /v1/charges); each charge commits in the
// provider's own database before it is answered, so a provider process
// killed with SIGKILL keeps what it charged, as a real provider does.
// Faults sets the rates of the two injected failures; Main runs it as a
// program (-addr, -db, -fail-rate, -lose-rate, -seed), which the payments
// example and the crash tests start as a process of its own.
//
// Client is the service's side: a sideeffect.Provider that sends the
// intent's downstream key as the Idempotency-Key and asks for status by
// key. It maps answers to what the reconciler needs to know: 2xx
// succeeded; a 4xx failed for good, except the statuses that say "not
// now" (Transient: 408, 409, 425, 429); a 5xx, a dropped connection or no
// answer unknown, to be settled by asking Status before any retry.
package httpprovider
