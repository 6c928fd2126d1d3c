package keyspace

import (
	"time"

	"github.com/oncekv/oncekv/kv"
)

// ExpiryAt returns t + retention, or kv.Never when retention is negative or
// when t + retention would fall after kv.Never (a retention past the time
// encoding, from a per-scope function the configuration could not check).
func ExpiryAt(t time.Time, retention time.Duration) time.Time {
	if retention < 0 || retention > kv.MaxRetention {
		return kv.Never
	}
	if e := t.Add(retention); e.Before(kv.Never) {
		return e
	}
	return kv.Never
}
