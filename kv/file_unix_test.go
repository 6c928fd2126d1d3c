//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package kv_test

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireUnlocked fails when something in this process still holds the
// file's lock: an Open that failed must have closed what it opened, or the
// next Open of the file waits for its lock and fails with ErrLocked.
func requireUnlocked(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), "a failed Open left the file locked")
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_UN))
}

// asNobody makes cmd run as the user nobody (the parent must be root).
func asNobody(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}
