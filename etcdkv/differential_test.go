package etcdkv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

var errRollback = errors.New("differential: roll back")

// FuzzEtcdAgreesWithBbolt runs the same transactions, decoded from the
// input, on a bbolt file and on etcd, both through kv.DB, and compares
// every answer: values (an empty one is not an absent one), cursor walks
// in both directions and from a Seek (bounded to a range too: kv.RangeCursor), a delete under the cursor and the
// Seek back to it, bucket names, sequences, which calls fail, rollbacks,
// the OnCommit functions run (after a commit only), and after every
// transaction the whole content. bbolt is the reference:
// the port promises the layers above the same answers on both.
func FuzzEtcdAgreesWithBbolt(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 1, 1, 1, 2, 1, 0, 4, 0, 1, 1, 0})             // a bucket, a put, a get
	f.Add([]byte{0, 1, 1, 2, 1, 1, 2, 0, 2, 1, 1, 3, 1, 5, 1, 5, 1, 1, 1, 0}) // puts, a walk forward and back
	f.Add([]byte{0, 1, 0, 2, 0, 1, 1, 0, 4, 0, 1, 1, 0, 3, 4, 0, 1, 1, 0})    // an empty value read back, in its transaction and after
	f.Add([]byte{0, 1, 2, 2, 2, 2, 1, 3, 0, 1, 9, 0, 4, 2, 2, 1, 3, 0})       // a rollback, then a read of what it wrote
	f.Add([]byte{0, 1, 0, 2, 0, 1, 1, 0, 2, 0, 1, 2, 0, 6, 0, 1, 1, 8, 7, 0, 0})
	f.Add([]byte{3, 2, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 0}) // writes in a read-only transaction
	// Committed keys and this transaction's writes and deletes, walked
	// forward and back by one cursor.
	f.Add([]byte{0, 1, 0, 2, 0, 1, 0, 1, 2, 0, 1, 1, 1, 0, 0, 2, 0, 2, 0, 2, 1, 3, 0, 1, 1, 5, 0, 4, 0, 0, 0, 1, 1, 0, 0})
	// Keys the port refuses (too long, empty) and the longest it takes, in
	// a write transaction and in a read-only one: the same errors.
	f.Add([]byte{0, 1, 0, 2, 0, 0xff, 1, 2, 0, 0xfe, 1, 2, 0, 0, 1, 4, 0, 0xfe, 0, 3, 2, 0, 0xff, 1, 2, 0, 0, 1, 0})
	// A prefetch of a key put before, of one absent and of one in a
	// bucket that does not exist, then reads of them, a put and a cursor
	// walk; a prefetch in a read-only transaction.
	f.Add([]byte{0, 1, 0, 2, 0, 1, 0, 1, 0, 0, 11, 2, 0, 1, 0, 0, 1, 1, 1, 1, 0, 4, 0, 1, 0, 4, 0, 1, 1, 2, 0, 1, 1, 2, 5, 0, 2, 0, 0, 0, 0, 0, 3, 11, 0, 0, 1, 0, 4, 0, 1, 0, 0})
	// Keys a, b and ba, then a cursor bounded to [b, b\x00) walked
	// forward from First: b, then the end.
	f.Add([]byte{0, 1, 0, 2, 0, 1, 0, 1, 2, 0, 1, 1, 1, 2, 0, 2, 1, 0, 1, 12, 0, 3, 0, 2, 2, 2, 0, 1, 1, 1, 2, 1, 2, 0})
	c := etcdtest.Start(f, etcdtest.Options{Members: 1})
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			return
		}
		// Pages of two or three keys for two inputs in three (chosen by
		// the input's length, so a failure replays): the few keys the
		// input makes cross page boundaries, which 128-key pages never
		// showed a cursor here.
		defer etcdkv.SetCursorPage([]int{128, 2, 3}[len(data)%3])()
		bolt, err := kv.Open(filepath.Join(t.TempDir(), "d.db"), &kv.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer bolt.Close()
		eb, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: fmt.Sprintf("/diff/%d/", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		etcd, err := kv.New(eb, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer etcd.Close()
		ctx := context.Background()
		r := &reader{kvtest.Input{Data: data}}
		for txn := 0; r.More(); txn++ {
			kind := r.Next() % 4
			prog := r.program()
			var logs [2]*strings.Builder
			var errs [2]error
			var ran [2]commits
			for i, db := range []*kv.DB{bolt, etcd} {
				logs[i] = &strings.Builder{}
				run := func(tx kv.Tx) error {
					logs[i].Reset() // the run that counts is the last (etcd runs a function again, and so does the rerun build)
					return prog.run(tx, logs[i], &ran[i])
				}
				if kind == 3 {
					errs[i] = db.View(ctx, run)
				} else {
					errs[i] = db.Update(ctx, run)
				}
			}
			if logs[0].String() != logs[1].String() || (errs[0] == nil) != (errs[1] == nil) || ran[0] != ran[1] {
				t.Fatalf("transaction %d (read-only: %t) differs\nbbolt (%v, %d OnCommit run):\n%s\netcd (%v, %d OnCommit run):\n%s", txn, kind == 3, errs[0], ran[0].n, logs[0], errs[1], ran[1].n, logs[1])
			}
			if (errs[0] != nil) && !errors.Is(errs[0], errRollback) {
				continue // a refused call: both failed alike
			}
			if a, b := dump(t, bolt), dump(t, etcd); a != b {
				t.Fatalf("after transaction %d the contents differ\nbbolt:\n%s\netcd:\n%s", txn, a, b)
			}
		}
	})
}

// reader decodes the input.
type reader struct{ kvtest.Input }

var (
	bucketNames = []string{"a", "b", "ab"}
	keyBytes    = []byte{'a', 'b', 0x00, 0xff}
)

func (r *reader) bucket() []byte { return []byte(bucketNames[int(r.Next())%len(bucketNames)]) }

// key is 0 to 3 bytes from a small alphabet, so keys collide, share
// prefixes and sort around 0x00 and 0xff; now and then the longest key the
// port takes (kv.MaxKeySize bytes), or one byte longer.
func (r *reader) key() []byte {
	n := int(r.Next())
	if n >= 0xfe { // the longest key the port takes, or one byte more
		return bytes.Repeat([]byte{'z'}, kv.MaxKeySize+n-0xfe)
	}
	k := []byte{}
	for range n % 4 {
		k = append(k, keyBytes[int(r.Next())%len(keyBytes)])
	}
	return k
}

// op is one call in a transaction.
type op struct {
	code   byte
	bucket []byte
	key    []byte
	moves  []byte
	keys   []kv.BucketKey // a prefetch's
	lo, hi []byte         // a bounded cursor's range (kv.RangeCursor; hi nil: to the end)
}

type program []op

// commits counts the OnCommit functions that ran (op 10), per database.
type commits struct{ n int }

// program reads ops up to an end op (code 0).
func (r *reader) program() program {
	var p program
	for r.More() {
		o := op{code: r.Next() % 13}
		switch o.code {
		case 0:
			return p
		case 1, 7:
			o.bucket = r.bucket()
		case 2:
			o.bucket, o.key = r.bucket(), r.key()
			o.moves = bytes.Repeat([]byte{'v'}, int(r.Next())%4) // the value: possibly empty
		case 3, 4, 6:
			o.bucket, o.key = r.bucket(), r.key()
		case 5, 12:
			o.bucket = r.bucket()
			o.moves = make([]byte, int(r.Next())%6+1)
			for i := range o.moves {
				o.moves[i] = r.Next()
			}
			o.key = r.key() // for a Seek
			if o.code == 12 {
				o.lo = r.key()
				if r.Next()%4 != 0 {
					o.hi = r.key()
				}
			}
		case 11:
			for range int(r.Next())%3 + 1 {
				o.keys = append(o.keys, kv.BucketKey{Bucket: r.bucket(), Key: r.key(), Absent: r.Next()%2 == 0})
			}
		}
		p = append(p, o)
	}
	return p
}

// failure names how a call failed: not at all, with one of the port's
// errors (the same on both backends), or otherwise.
func failure(err error) string {
	for _, pe := range []error{kv.ErrKeyRequired, kv.ErrKeyTooLarge, kv.ErrBucketNameRequired, kv.ErrTxNotWritable, kv.ErrReservedName} {
		if errors.Is(err, pe) {
			return "failed: " + pe.Error()
		}
	}
	if err != nil {
		return "failed"
	}
	return "ok"
}

// run plays p in tx and writes every answer to log.
func (p program) run(tx kv.Tx, log *strings.Builder, ran *commits) error {
	say := func(format string, args ...any) { fmt.Fprintf(log, format+"\n", args...) }
	for _, o := range p {
		var b kv.Bucket
		if o.bucket != nil && o.code != 1 {
			if b = tx.Bucket(o.bucket); b == nil {
				say("bucket %q: none", o.bucket)
				continue
			}
		}
		switch o.code {
		case 1:
			_, err := tx.CreateBucketIfNotExists(o.bucket)
			say("create %q: %s", o.bucket, failure(err))
		case 2:
			err := b.Put(o.key, o.moves)
			say("put %q %s=%q: %s", o.bucket, short(o.key), o.moves, failure(err))
		case 3:
			err := b.Delete(o.key)
			say("delete %q %s: %s", o.bucket, short(o.key), failure(err))
		case 4:
			say("get %q %s: %s", o.bucket, short(o.key), value(b.Get(o.key)))
		case 5, 12:
			c, name := b.Cursor(), fmt.Sprintf("cursor %q", o.bucket)
			if o.code == 12 {
				// etcd's bounded cursor (kv.Ranger), bbolt's the bounds
				// kept over its plain one: the same walk.
				c, name = kv.RangeCursor(b, o.lo, o.hi), fmt.Sprintf("cursor %q [%s, %s)", o.bucket, value(o.lo), value(o.hi))
			}
			var k, v []byte
			for i, m := range o.moves {
				switch {
				case i == 0 && m%3 == 0:
					k, v = c.First()
				case i == 0 && m%3 == 1:
					k, v = c.Last()
				case i == 0:
					k, v = c.Seek(o.key)
				case m%2 == 0:
					k, v = c.Next()
				default:
					k, v = c.Prev()
				}
				say("%s move %d (%d): %s=%s", name, i, m, value(k), value(v))
				if k == nil {
					break
				}
			}
		case 6:
			// The port's way to delete while iterating: the key under the
			// cursor, then a Seek to it again.
			c := b.Cursor()
			k, _ := c.Seek(o.key)
			if k == nil {
				say("seek %q %s: end", o.bucket, short(o.key))
				continue
			}
			k = bytes.Clone(k)
			err := b.Delete(k)
			k2, v2 := c.Seek(k)
			say("delete under cursor %q %s: %s, then %s=%s", o.bucket, short(k), failure(err), value(k2), value(v2))
		case 7:
			s, err := b.NextSequence()
			say("sequence %q: %t", o.bucket, err == nil && s > 0) // values differ by design; both must give one
		case 8:
			c := tx.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				say("bucket name %q", k)
			}
		case 9:
			say("roll back")
			return errRollback
		case 10:
			tx.OnCommit(func() { ran.n++ })
		case 11:
			// Only etcd's Tx prefetches (kv.BucketKey): every read after
			// it must answer as bbolt's does, whether the prefetch read
			// its keys or guessed them (a key marked Absent that exists,
			// a value remembered from an earlier transaction).
			raw := tx
			for u, ok := raw.(interface{ Unwrap() kv.Tx }); ok; u, ok = raw.(interface{ Unwrap() kv.Tx }) {
				raw = u.Unwrap()
			}
			if p, ok := raw.(interface{ Prefetch([]kv.BucketKey) }); ok {
				p.Prefetch(o.keys)
			}
			say("prefetch %d keys", len(o.keys))
		}
	}
	return nil
}

// value shows a value with its absence apart from its emptiness.
func value(v []byte) string {
	if v == nil {
		return "nil"
	}
	return short(v)
}

// short quotes b, its length in place of most of it when it is long.
func short(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%q… (%d bytes)", b[:8], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// dump is the whole content: every bucket and its pairs.
func dump(t *testing.T, db *kv.DB) string {
	var s strings.Builder
	err := db.View(context.Background(), func(tx kv.Tx) error {
		s.Reset() // a View's function may run again
		c := tx.Cursor()
		for name, _ := c.First(); name != nil; name, _ = c.Next() {
			fmt.Fprintf(&s, "[%q]\n", name)
			b := tx.Bucket(name)
			if b == nil {
				fmt.Fprintf(&s, "  (listed, not opened)\n")
				continue
			}
			bc := b.Cursor()
			for k, v := bc.First(); k != nil; k, v = bc.Next() {
				fmt.Fprintf(&s, "  %s=%s\n", short(k), value(v))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s.String()
}
