// Package sideeffect makes calls to systems you do not control (payment
// providers, email, third-party APIs) safe to retry. The rule: record the
// intent in the same transaction as the business change, call the provider
// with a key derived from ours, and never retry blindly — ask the provider
// first.
//
// # Intents
//
// An Intent ("charge pending for order/1042") is created with CreateTx in the
// caller's transaction. Its ID is its downstream key, DownstreamKey(scope,
// key, purpose): a UUIDv5, the same on every retry and after every restart,
// so the provider sees one key per logical side effect and can deduplicate.
//
// A Handler per intent kind names the Provider and the completions that run
// in the transaction that finishes the intent (OnSucceeded: "order paid";
// OnFailed: "order declined").
//
// # Executing
//
// Execute takes the intent over (a new version and a lease, committed), calls
// the provider outside any transaction, and records the outcome in one
// transaction with the completion, only if the version is still its own: an
// executor that stalled and was taken over writes nothing. The first attempt
// calls Provider.Do; every later attempt calls Provider.Status first and
// sends the call again (same key) only if the provider never received it.
//
// Perform wires this to the two-phase ledger path for an idempotent request
// whose work is one side effect. A request interrupted after the provider
// charged (the response lost, the process killed) is finished by the next
// retry or by the reconciler asking the provider, not by charging again.
//
// # Reconciler
//
// RunOnce picks every intent that is due — pending past Config.Grace,
// unknown past its backoff, or left by an attempt whose lease ran out or
// whose process died — asks Status, and then finishes it (succeeded),
// re-sends it with the same key (not found), marks it failed (failed), or
// backs off with full jitter (unknown). After Config.MaxAttempts it parks the
// intent as needs_attention, where it stays, visible, until an operator
// calls Resolve or Requeue. Run is the background loop: woken by the commit
// of new intents, sleeping until the next one is due, polling only as a
// fallback.
//
// An intent that cannot be attempted at all stays due: one of a kind the
// Executor has no handler for (a deploy that dropped it), or whose record
// does not decode. The reconciler logs it ("reconcile intent", with the
// error) and leaves it alone for Config.PollInterval, passing over it to
// the intents behind it; it is tried again then, and an Executor that has
// the handler runs it.
//
// A panic in your code does not end the process, which would meet the
// same intent after every restart: a provider's panic is an unknown
// outcome (it may have acted), a completion's (OnSucceeded, OnFailed)
// rolls its transaction back, and any other in a pass is that intent's
// error; each is logged with its stack, and the intent is tried again
// when due, parked after MaxAttempts if it keeps failing.
//
// # Clients
//
// RetryPolicy is the client half: bounded attempts, an overall deadline,
// exponential backoff with full jitter, Retry-After honoured, and only
// failures that may be transient retried (Classify). A POST or PATCH without
// an Idempotency-Key is never retried (*NotRetryableError). KeyStore creates
// one key per logical operation and persists it before the first attempt, so
// a restarted client resumes with the same key.
//
// # Caveats
//
//   - Effectively-once depends on the provider honouring the downstream key
//     and answering Status truthfully. A provider without either can only be
//     at-least-once (or at-most-once, if you never retry).
//   - Completions (OnSucceeded, OnFailed, Respond) may run more than once
//     under group commit and must write only through their transaction.
//   - Intents in needs_attention are never retried or removed automatically.
//   - With kv.Options.Cipher set, an intent's payload, result, provider
//     error text and resolution are sealed (package seal), bound to its ID;
//     kind, subject, state, attempts and times stay clear for the
//     schedule. Read without the key, Intents yields them Closed.
package sideeffect
