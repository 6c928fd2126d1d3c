// Package syncfault runs a test in a child process whose syncs fail (or
// are slow): the test binary runs the named test again under strace,
// which answers EIO to chosen calls of fdatasync (bbolt's sync of a
// commit) without making them. That is what a disk that fails a write-back looks like to
// bbolt, at a point no in-process hook reaches: between a commit's meta
// page written into the file and its sync. Delay makes the chosen calls
// slow instead (strace holds them back, then lets them sync), and
// FailAfter slow and then failed: a commit's meta page lies in the file,
// unsynced, for as long as a test needs to read it.
//
// bbolt syncs twice a commit, its pages and then its meta page, so on a
// file that exists already (a new one costs one sync to create) the
// meta page of the n-th commit is sync number 2n. strace counts each
// thread's calls on their own: Child locks the child's test goroutine to
// its thread, and the child's database writes must run on it (kv runs a
// lone caller's transaction, Batch's included, on the caller's
// goroutine). A commit made on another goroutine (a worker's) may make
// its two syncs on two threads and escape the count.
//
// Run skips the test where strace is missing or may not trace (a
// container without ptrace), and fails it there when
// ONCEKV_REQUIRE_STRACE is set: .ci/run installs strace and sets it.
package syncfault
