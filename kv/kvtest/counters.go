package kvtest

import (
	"strconv"

	"github.com/oncekv/oncekv/internal/rerun"
	"github.com/oncekv/oncekv/kv"
)

// Counts reports whether the run of a transaction function that calls it
// (on the goroutine running the transaction) counts as a call, for a test
// that counts its function's calls: every run does, but the second of a
// rerun build's two (package internal/rerun), which repeats the first.
// The count stays what one run of each transaction gives, while the
// library's code still runs twice. A run that rolls back for another
// reason (a group commit's failed batch) counts, as it did.
func Counts() bool { return !rerun.Enabled || !rerun.Again() }

// Increment adds one to the counter key of bucket (created if needed), in
// tx: the state change a test counts to see how many times work took
// effect, a rolled-back run leaving no count.
func Increment(tx kv.Tx, bucket, key string) error {
	b, err := tx.CreateBucketIfNotExists([]byte(bucket))
	if err != nil {
		return err
	}
	return b.Put([]byte(key), []byte(strconv.Itoa(Counter(tx, bucket, key)+1)))
}

// Counter reads one counter of bucket: 0 if it or the bucket is absent.
func Counter(tx kv.Tx, bucket, key string) int {
	b := tx.Bucket([]byte(bucket))
	if b == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(b.Get([]byte(key))))
	return n
}

// Counters reads every counter of bucket (none if it does not exist).
func Counters(tx kv.Tx, bucket string) map[string]int {
	counts := map[string]int{}
	if b := tx.Bucket([]byte(bucket)); b != nil {
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			counts[string(k)], _ = strconv.Atoi(string(v))
		}
	}
	return counts
}
