// Package loop is the one background run loop of oncekv's workers (the
// retention sweeper, the outbox relay, the intent reconciler): run a pass,
// report it, wait for a wake-up, a timer or the end of the context.
//
// # The model
//
// Run calls a pass, reports its figures and error to the caller's
// callback, and waits for what the pass asked (its own next wait), a
// wake-up (new work signalled in process), or the end of the context. A
// pass that panics is that pass's error, logged with its stack, and the
// next comes after Config.AfterPanic: a worker does not take the process
// down, nor stop for good. The errors of Config.Final (a closed database,
// a failed sync) end the loop, since no later pass could do anything; and
// when the database starts refusing calls (Config.Refusing), the next
// pass runs at once to meet the refusal instead of sleeping first. One
// loop for three workers means one place where these rules hold.
package loop
