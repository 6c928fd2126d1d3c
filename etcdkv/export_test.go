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
