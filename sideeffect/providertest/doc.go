// Package providertest is a fake side-effect provider for tests and
// examples: it honours downstream keys, records every charge and every call,
// answers status by key, and injects the failures that matter — failing
// before charging, and charging then losing the response.
//
// # The model
//
// A Fake is an in-memory sideeffect.Provider, as a payment API would be
// with idempotency keys: Do charges once per downstream key (a second Do
// with the key replays the first charge's answer, or its decline), and
// Status answers by key whether a charge exists. Charges returns what it
// charged and Log (or Ops, for one key) every call it received, so a test
// asserts on the provider's side, exactly once, not on what the caller
// believes.
//
// Faults come from Rates (random, from the seed given to New, so a run can
// be repeated) or from Script, which picks the fault of each call:
//
//   - FailBeforeCharge: an error, nothing charged (a 503).
//   - LoseResponse: the charge goes through, then the caller gets an error
//     (ErrLost), as when a connection resets on the way back. This is the
//     case a reconciler exists for: retrying blindly would charge twice
//     without the downstream key, and asking Status first tells.
//   - Decline: a definite refusal, remembered for the key.
//   - StatusUnknown: a Status that cannot answer.
//
// Package httpprovider is the same provider behind a real HTTP API with
// its own bbolt file, for tests and demos that kill processes.
package providertest
