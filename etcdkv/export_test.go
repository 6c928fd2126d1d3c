package etcdkv

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
