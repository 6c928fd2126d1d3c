//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package kv_test

import (
	"os/exec"
	"testing"
)

// requireUnlocked cannot tell here, where bbolt does not lock with flock.
func requireUnlocked(*testing.T, string) {}

// asNobody is not reached here: only root's tests run a child as nobody.
func asNobody(*exec.Cmd) {}
