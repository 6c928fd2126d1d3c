package kv

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
)

// A full disk, met by a commit. bbolt rolls a failed commit back by
// rebuilding its list of free pages, and with the freelist written at
// close (oncekv's default) it rebuilds it by reading every page of the
// file: some 60 ms for a 150 MB file, 0.3-0.4 s at a million records,
// inside the writer's turn. Each batch that tries, while the disk stays
// full, pays it again: without a pause the writer would spend its whole
// time failing, a core with it, and every write queued behind it would
// wait for its turn to fail.
//
// So once a commit fails for lack of space (ENOSPC, or EDQUOT), the next
// ones are refused without trying, with the same error, for ten times
// what the failed commit took (at least noSpaceMinWait, at most
// noSpaceMaxWait): failing costs the writer a tenth of its time at most.
// A commit is tried again once that time has passed, or at once when the
// file system has more room than it had at the failure (noSpaceRoom more:
// space was freed), where the platform says (Linux and macOS); one that
// commits ends the pause. Reads, and writes that fit in the pages bbolt
// freed, are not refused, but the latter wait, like the others, for the
// pause to end.

// noSpaceRoom is how much more room the file system must have than at the
// failure for a commit to be tried before its pause ends: space was freed.
// A commit that then fails all the same pauses again, from the new room.
const noSpaceRoom = 64 << 10

var (
	noSpaceMinWait = 100 * time.Millisecond
	noSpaceMaxWait = 5 * time.Second
)

// noSpace is the pause after a commit failed for lack of space.
type noSpace struct {
	// until is when the pause ends (UnixNano; 0: no pause). Every field
	// is read and written only within the writer's turn (DB.commit),
	// which orders them.
	until int64
	// cause is the failed commit's error, free the file system's room
	// then (known: whether the platform told); read only while until is
	// set.
	cause error
	free  uint64
	known bool
	// minWait, maxWait bound the pause (noSpaceMinWait, noSpaceMaxWait
	// unless a test sets them).
	minWait, maxWait time.Duration
}

// NoSpaceError is the error of a write refused during the pause that
// follows a commit that failed for lack of space. It matches that
// commit's error (errors.Is(err, syscall.ENOSPC), or EDQUOT).
type NoSpaceError struct {
	// Until is when a commit is tried again, unless space returns first.
	Until time.Time
	// Err is the failed commit's error.
	Err error
}

func (e *NoSpaceError) Error() string {
	return fmt.Sprintf("kv: write refused without trying: a commit failed for lack of space (%v); the next is tried at %s, or once the disk has room again",
		e.Err, e.Until.Format(time.RFC3339Nano))
}

// Unwrap returns the failed commit's error.
func (e *NoSpaceError) Unwrap() error { return e.Err }

// noSpaceCommit is the error of a bbolt commit that failed for lack of
// space (a transaction function's own ENOSPC, met on another disk, begins
// no pause). It reads as the commit's error.
type noSpaceCommit struct{ err error }

func (e *noSpaceCommit) Error() string { return e.err.Error() }
func (e *noSpaceCommit) Unwrap() error { return e.err }

// IsNoSpace reports whether err is a full disk's (syscall.ENOSPC) or an
// exhausted quota's (syscall.EDQUOT): a write that failed, or was refused
// during the pause after such a failure, and that can run once space
// returns, with no restart.
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// refusal returns the error a commit of the file at path gets now: nil
// when there is no pause, its time has passed, or the file system has
// room again.
func (n *noSpace) refusal(path string) error {
	until := n.until
	if until == 0 || time.Now().UnixNano() >= until {
		return nil
	}
	if n.known {
		if free, ok := freeBytes(path); ok && free >= n.free+noSpaceRoom {
			return nil
		}
	}
	return &NoSpaceError{Until: time.Unix(0, until), Err: n.cause}
}

// record notes the outcome of a commit of the file at path, made in the
// writer's turn taken at turnSince (DB.writerSince): a failure for lack of
// space begins a pause, a commit ends it.
func (n *noSpace) record(path string, err error, turnSince *atomic.Int64) {
	switch {
	case err == nil:
		n.until = 0
	case errors.As(err, new(*noSpaceCommit)):
		took := time.Since(writerEpoch) - time.Duration(turnSince.Load()-1)
		wait := min(max(10*took, n.minWait), n.maxWait)
		n.cause = err
		n.free, n.known = freeBytes(path)
		n.until = time.Now().Add(wait).UnixNano()
	}
}
