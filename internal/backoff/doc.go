// Package backoff computes retry delays: capped exponential growth with full
// jitter. The sideeffect and outbox packages re-export Backoff.
//
// # The model
//
// A Backoff's Ceiling grows from Base, doubling with each attempt, up to
// Cap; Delay draws uniformly from zero to that ceiling ("full jitter", as
// in AWS's analysis of backoff strategies). Full jitter trades a little
// mean delay for spreading: a thousand intents that failed against one
// provider outage come back over the whole window, not as a second wave
// at the same instant. Rand can be fixed for tests. The intent reconciler
// and the outbox relay use it between attempts, and the Retry-After the
// middleware answers for a pending intent comes from it.
package backoff
