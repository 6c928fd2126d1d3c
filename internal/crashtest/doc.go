// Package crashtest is oncekv's crash suite: it kills a real process with
// SIGKILL at every failpoint (internal/failpoint) and at random moments,
// reopens the database, checks it, restarts the workload with the same
// client keys, and compares the end state with what was acknowledged —
// the Jepsen categories lost, duplicated and unexpected must all be zero.
// It also checks the ledger's history for linearizability (porcupine),
// and (TestPowerLoss) cuts the power under the durable workload on
// internal/powercut's filesystem, which loses every write not yet synced.
//
// The failpoint tests need a build with the failpoints tag:
//
//	go test -tags failpoints ./internal/crashtest                     # CI profile: 10 crashes per failpoint
//	ONCEKV_CRASH_CYCLES=100 go test -tags failpoints ./internal/crashtest -timeout 2h   # release profile
//
// TestPowerLoss needs the powercut program, root and /dev/fuse (make
// powerloss builds it and runs 300 cuts; .ci/run, 30).
package crashtest
