package syncfault

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// childEnv marks the child process and holds the strace expression.
const childEnv = "ONCEKV_SYNCFAULT_CHILD"

// Child reports whether this process is the child of Run, and if so locks
// the calling goroutine (the test's) to its thread, for strace's count.
func Child() bool {
	if os.Getenv(childEnv) == "" {
		return false
	}
	runtime.LockOSThread()
	return true
}

// Run runs t's test again in a child process under strace, whose
// fdatasync calls numbered when (strace's syntax: "2", "2+" for the
// second and every later one) fail with EIO, with env added to its
// environment. The child's test is the same function, in which Child
// returns true; it fails the parent's test if it fails.
func Run(t testing.TB, when string, env ...string) {
	t.Helper()
	run(t, "error=EIO:when="+when, env)
}

// Delay is Run with the fdatasync calls numbered when made slow instead
// of failed: each waits d before it starts, and then syncs. A commit's
// meta page then lies in the file, unsynced, for at least d.
func Delay(t testing.TB, when string, d time.Duration, env ...string) {
	t.Helper()
	run(t, fmt.Sprintf("delay_enter=%d:when=%s", d.Microseconds(), when), env)
}

// FailAfter is Run whose failing syncs first wait d: a commit's meta
// page lies in the file for at least d before its sync fails.
func FailAfter(t testing.TB, when string, d time.Duration, env ...string) {
	t.Helper()
	run(t, fmt.Sprintf("error=EIO:delay_enter=%d:when=%s", d.Microseconds(), when), env)
}

// run runs t's test again in a child under strace with fdatasync's
// injection inject (strace's syntax after "inject=fdatasync:").
func run(t testing.TB, inject string, env []string) {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		skip(t, "syncfault: strace is not installed (apt-get install strace); .ci/run installs it")
	}
	name := t.Name()
	if i := strings.IndexByte(name, '/'); i >= 0 {
		t.Fatalf("syncfault: Run from a subtest (%s)", name)
	}
	args := []string{"-f", "-qq", "-o", os.DevNull,
		"-e", "trace=fdatasync", "-e", "inject=fdatasync:" + inject,
		os.Args[0], "-test.run=^" + name + "$", "-test.v", "-test.count=1"}
	cmd := exec.Command(strace, args...) //nolint:gosec // strace running this test binary
	cmd.Env = append(append(os.Environ(), childEnv+"="+inject), env...)
	out, err := cmd.CombinedOutput()
	if bytes.Contains(out, []byte("ptrace")) && !bytes.Contains(out, []byte("--- ")) {
		skip(t, "syncfault: strace may not trace here: "+string(out))
	}
	if err != nil {
		t.Fatalf("syncfault: the child failed (%v):\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+name)) {
		t.Fatalf("syncfault: the child did not run %s:\n%s", name, out)
	}
}

// skip skips t, or fails it where ONCEKV_REQUIRE_STRACE is set (.ci/run).
func skip(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("ONCEKV_REQUIRE_STRACE") != "" {
		t.Fatal(why + " (ONCEKV_REQUIRE_STRACE is set)")
	}
	t.Skip(why)
}
