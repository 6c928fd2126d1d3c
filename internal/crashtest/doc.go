// Package crashtest is oncekv's crash suite: it kills a real process with
// SIGKILL at every failpoint (internal/failpoint) and at random moments,
// reopens the database, checks it (every operation acknowledged before
// the crash must be there: the restart would do a lost one again),
// restarts the workload with the same client keys, and compares the end
// state with what was acknowledged — the Jepsen categories lost,
// duplicated and unexpected must all be zero.
// It also checks the ledger's history for linearizability (porcupine),
// and cuts the power, on internal/powercut's filesystem, which loses
// every write not yet synced: under the durable workload (TestPowerLoss),
// under an HTTP service behind the idempotency middleware whose clients
// send every request twice (TestHTTPPowerLoss: each answer given must
// replay after the restart), and under backups and restores.
//
// The failpoint tests need a build with the failpoints tag:
//
//	go test -tags failpoints ./internal/crashtest                     # CI profile: 10 crashes per failpoint
//	ONCEKV_CRASH_CYCLES=100 go test -tags failpoints ./internal/crashtest -timeout 2h   # release profile
//
// The power-loss tests need the powercut program (ONCEKV_POWERCUT), root
// and /dev/fuse (kvtest.PowercutProgram): make powerloss builds it and
// runs 1,100 cuts, and 50 more under the payments example
// (examples/payments, TestPaymentsUnderPowerLoss); .ci/run a tenth of
// them.
package crashtest
