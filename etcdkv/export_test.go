package etcdkv

import "sync/atomic"

// SetCursorPage makes cursors fetch n keys at a time until the returned
// function restores the default: the differential test's few keys then
// cross page boundaries, forwards and backwards, in both kinds of
// transaction.
func SetCursorPage(n int) (restore func()) {
	old := cursorPage
	cursorPage = n
	return func() { cursorPage = old }
}

// SetMarkersPerLease makes a commit marker lease carry n markers until the
// returned function restores the default.
func SetMarkersPerLease(n int) (restore func()) {
	old := markersPerLease
	markersPerLease = n
	return func() { markersPerLease = old }
}

// LoseAnswers drops the answer of every n-th commit of every backend of
// this process (each then settled by its marker, as after a network
// fault) until restore; lost counts the answers dropped.
func LoseAnswers(n int64) (lost func() int64, restore func()) {
	var commits, dropped atomic.Int64
	loseAnswer = func() bool {
		if commits.Add(1)%n != 0 {
			return false
		}
		dropped.Add(1)
		return true
	}
	return dropped.Load, func() { loseAnswer = nil }
}
