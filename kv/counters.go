package kv

// Counter is one count a backend keeps of its own events since it was
// opened: what an operator needs to see of a backend with several writers
// (etcd's conflicts, retries and guesses), and that the layers above do
// not see. Metrics adapters export each as a monotonic counter
// (the OpenTelemetry adapter: oncekv.<backend>.<name>).
type Counter struct {
	// Name names the count, lower case, dotted ("conflicts",
	// "guesses.refused"): fixed for a backend, one of a kind per call.
	Name string
	// Unit is the count's unit in UCUM, as OpenTelemetry writes it
	// ("{attempt}", "{transaction}").
	Unit string
	// Description says what is counted, in a sentence.
	Description string
	// Value is the count since the backend was opened.
	Value uint64
}

// Counting is implemented by a backend that counts events of its own
// (DB.Counters). Counters returns the same names, in the same order, at
// every call.
type Counting interface {
	Counters() []Counter
}

// Counters returns the counts the backend keeps of its own events since it
// was opened (Counter), or nil when it keeps none: the bbolt backend has
// one writer and nothing to count that the layers above and DB.Writer do
// not show already; etcdkv counts its conflicts, retries, commits whose
// answer was lost, and guesses.
func (db *DB) Counters() []Counter {
	if c, ok := db.backend.(Counting); ok {
		return c.Counters()
	}
	return nil
}
