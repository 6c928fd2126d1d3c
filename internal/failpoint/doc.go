// Package failpoint names the points where oncekv's crash tests kill the
// process: every commit boundary and every call to the outside world.
//
// In a normal build Inject is an empty function the compiler removes: the
// points cost nothing. Built with -tags failpoints, Inject kills the process
// with SIGKILL when it reaches the point named by the ONCEKV_FAILPOINT
// environment variable for the n-th time ("name@n"; n defaults to 1).
//
// # The model
//
// The points are named in the order a request meets them (All lists
// them): before and after each commit of group commit and of every
// package's own transactions, before and after a provider call or a
// publish, and where the record log's in-memory directory can diverge
// from the file (an entry added but not committed, a rebuild, a migration
// batch, the tail moved to the log). The crash suite (internal/crashtest)
// runs a workload in a child process, lets each point kill it in turn,
// reopens and checks the file, restarts the workload with the same client
// keys, and compares the end state with what was acknowledged: nothing
// lost, nothing done twice, nothing unexpected.
//
// The kill is selfkill's: SIGKILL on Unix, so no deferred function, flush
// or close runs, as in a real crash.
package failpoint
