package selfkill

import (
	"os"
	"time"
)

// ExitCode is the exit code of a process killed by Now on Windows: 128 +
// 9, what a Unix shell reports for SIGKILL.
const ExitCode = 137

// Now kills the running process and never returns.
func Now() {
	kill()
	for {
		time.Sleep(time.Hour) // the kill is asynchronous; a bare select{} would be a deadlock Go could end first
	}
}

// Killed reports whether the process st describes was killed: by SIGKILL
// on Unix (from Now or from another process), by Now on Windows.
func Killed(st *os.ProcessState) bool {
	return st != nil && killed(st)
}
