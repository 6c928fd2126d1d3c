package idemhttp

import "github.com/oncekv/oncekv/kv"

// trackedTx is the transaction an in-transaction handler sees: the
// ledger's, with every write noted, so that a 4xx answer whose handler
// wrote nothing — a request rejected by validation before it did anything —
// is not stored (Stripe's rule, issue 13, item 8): a corrected retry with the
// same key then runs, and rejected requests cannot fill the file.
var (
	_ kv.Tx     = trackedTx{}
	_ kv.Bucket = trackedBucket{}
)

type trackedTx struct {
	kv.Tx
	wrote *bool
}

// Unwrap returns the ledger's transaction (kv.BoltTx follows it). Raw bbolt
// writes cannot be seen, so unwrapping counts as a write.
func (t trackedTx) Unwrap() kv.Tx {
	*t.wrote = true
	return t.Tx
}

func (t trackedTx) Bucket(name []byte) kv.Bucket { return t.bucket(t.Tx.Bucket(name)) }

func (t trackedTx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	b, err := t.Tx.CreateBucketIfNotExists(name)
	*t.wrote = true // creating a bucket may be a write; counting it is the safe side
	return t.bucket(b), err
}

func (t trackedTx) bucket(b kv.Bucket) kv.Bucket {
	if b == nil {
		return nil
	}
	return trackedBucket{b, t.wrote}
}

type trackedBucket struct {
	b     kv.Bucket
	wrote *bool
}

func (b trackedBucket) Get(k []byte) []byte { return b.b.Get(k) }

func (b trackedBucket) Put(k, v []byte) error { *b.wrote = true; return b.b.Put(k, v) }
func (b trackedBucket) Delete(k []byte) error { *b.wrote = true; return b.b.Delete(k) }
func (b trackedBucket) NextSequence() (uint64, error) {
	*b.wrote = true
	return b.b.NextSequence()
}
func (b trackedBucket) Cursor() kv.Cursor { return b.b.Cursor() }

// RangeCursor passes kv.RangeCursor on to the bucket wrapped, so that a
// handler's bounded scan is bounded on the backend too (kv.Ranger).
func (b trackedBucket) RangeCursor(lo, hi []byte) kv.Cursor { return kv.RangeCursor(b.b, lo, hi) }
