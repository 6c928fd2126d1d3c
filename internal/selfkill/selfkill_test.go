package selfkill_test

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/internal/selfkill"
)

func TestMain(m *testing.M) {
	switch os.Getenv("SELFKILL_CHILD") {
	case "kill":
		selfkill.Now()
	case "exit":
		os.Exit(1)
	case "fail":
		os.Exit(2) // any other failure
	}
	goleak.VerifyTestMain(m)
}

// A process that kills itself with Now is Killed; one that exits, with
// an error or not, is not.
func TestKilledTellsAKillFromAnExit(t *testing.T) {
	for mode, want := range map[string]bool{"kill": true, "exit": false, "fail": false, "": false} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SELFKILL_CHILD="+mode)
		_ = cmd.Run()
		if got := selfkill.Killed(cmd.ProcessState); got != want {
			t.Errorf("child %q: Killed = %v (%s), want %v", mode, got, cmd.ProcessState, want)
		}
	}
	if selfkill.Killed(nil) {
		t.Error("Killed(nil) = true: a process that never ran was not killed")
	}
}

// A process killed from outside (os.Process.Kill: SIGKILL on Unix) is
// Killed too, where the kill is a signal.
func TestKilledByAnother(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestSleepForever$")
	cmd.Env = append(os.Environ(), "SELFKILL_SLEEP=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if got, want := selfkill.Killed(cmd.ProcessState), runtime.GOOS != "windows"; got != want {
		t.Fatalf("Killed = %v (%s), want %v", got, cmd.ProcessState, want)
	}
}

// TestSleepForever is TestKilledByAnother's child.
func TestSleepForever(t *testing.T) {
	if os.Getenv("SELFKILL_SLEEP") == "" {
		t.Skip("the child of TestKilledByAnother")
	}
	time.Sleep(time.Hour) // until killed
}
