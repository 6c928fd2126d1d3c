package outbox

// SetMaxReading makes a reading of the whole queue keep n events until the
// returned function restores the default.
func SetMaxReading(n int) (restore func()) {
	old := maxReading
	maxReading = n
	return func() { maxReading = old }
}
