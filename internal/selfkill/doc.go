// Package selfkill ends the running process at once, as a crash would,
// and tells a process that ended so from one that exited: what the crash
// points of the tests (idemhttptest.Crashpoint, the failpoints, the
// killed producers and consumers) use.
//
// On Unix the process sends itself SIGKILL: no deferred function, no
// flush, no close runs, and its parent sees "signal: killed". Windows has
// no signals: the process is ended by TerminateProcess, which runs no
// more of its code either, with the exit code ExitCode, which its parent
// reads as the kill (os.Process.Kill's exit code, 1, is any failed test's
// too).
package selfkill
