package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
)

// RunConformance is the suite every kv backend must pass unchanged: the
// bbolt backend runs it in package kv's tests, package etcdkv against a
// real etcd cluster. open returns a fresh, empty backend for each subtest;
// the suite closes it.
//
// It checks what oncekv's packages rely on: buckets, values and
// read-your-writes, cursor order in both directions with Seek, cursors bounded to a range
// (kv.RangeCursor), deletion
// while iterating, sequences, rollback on error and panic, OnCommit only after a
// commit, snapshot reads, the port's write errors (empty keys and names,
// keys over kv.MaxKeySize, writes in a read-only transaction), and
// serializable write transactions under
// concurrency — lost updates, phantoms in scanned ranges (bounded or not) and deletions
// inside scanned ranges must all be impossible.
func RunConformance(t *testing.T, open func(t testing.TB) kv.Backend) {
	RequireOneRun(t, "the suite pins what one run of each function does: the backend's own semantics")
	run := func(name string, fn func(t *testing.T, b kv.Backend)) {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			fn(t, b)
		})
	}
	run("Traits", testTraits)
	run("BucketsAndValues", testBucketsAndValues)
	run("ReadYourWrites", testReadYourWrites)
	run("CursorOrder", testCursorOrder)
	run("RangeCursor", testRangeCursor)
	run("DeleteWhileIterating", testDeleteWhileIterating)
	run("TopLevelCursor", testTopLevelCursor)
	run("Rollback", testRollback)
	run("OnCommit", testOnCommit)
	run("Sequence", testSequence)
	run("ReadOnly", testReadOnly)
	run("Snapshot", testSnapshot)
	run("LargeValue", testLargeValue)
	run("KeyLimits", testKeyLimits)
	run("NoLostUpdates", testNoLostUpdates)
	run("NoPhantoms", testNoPhantoms)
	run("NoPhantomsInRange", testNoPhantomsInRange)
	run("NoDeletedRangeRace", testNoDeletedRangeRace)
	run("ThroughDB", testThroughDB)
}

var bg = context.Background()

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func update(t *testing.T, b kv.Backend, fn func(tx kv.Tx) error) {
	t.Helper()
	must(t, b.Update(bg, fn))
}

func view(t *testing.T, b kv.Backend, fn func(tx kv.Tx) error) {
	t.Helper()
	must(t, b.View(bg, fn))
}

func bucket(tx kv.Tx, name string) (kv.Bucket, error) {
	return tx.CreateBucketIfNotExists([]byte(name))
}

func getString(b kv.Backend, bucketName, key string) (string, bool, error) {
	var v []byte
	var ok bool
	err := b.View(bg, func(tx kv.Tx) error {
		bk := tx.Bucket([]byte(bucketName))
		if bk == nil {
			return nil
		}
		got := bk.Get([]byte(key))
		v, ok = bytes.Clone(got), got != nil
		return nil
	})
	return string(v), ok, err
}

func wantValue(t *testing.T, b kv.Backend, bucketName, key, want string) {
	t.Helper()
	got, ok, err := getString(b, bucketName, key)
	must(t, err)
	if !ok || got != want {
		t.Fatalf("%s/%s = %q (present %v), want %q", bucketName, key, got, ok, want)
	}
}

func wantAbsent(t *testing.T, b kv.Backend, bucketName, key string) {
	t.Helper()
	got, ok, err := getString(b, bucketName, key)
	must(t, err)
	if ok {
		t.Fatalf("%s/%s = %q, want absent", bucketName, key, got)
	}
}

func testTraits(t *testing.T, b kv.Backend) {
	tr := b.Traits()
	if tr.Name == "" {
		t.Fatal("Traits().Name is empty")
	}
	if tr.MaxTxOps < 0 {
		t.Fatalf("Traits().MaxTxOps = %d", tr.MaxTxOps)
	}
}

func testBucketsAndValues(t *testing.T, b kv.Backend) {
	view(t, b, func(tx kv.Tx) error {
		if tx.Bucket([]byte("b")) != nil {
			t.Fatal("a bucket exists before it was created")
		}
		return nil
	})
	update(t, b, func(tx kv.Tx) error {
		bk, err := bucket(tx, "b")
		if err != nil {
			return err
		}
		if err := bk.Put([]byte("k1"), []byte("v1")); err != nil {
			return err
		}
		if err := bk.Put([]byte("k2"), []byte("v2")); err != nil {
			return err
		}
		return bk.Put([]byte{0, 0xff, 1}, []byte{0})
	})
	wantValue(t, b, "b", "k1", "v1")
	wantValue(t, b, "b", "\x00\xff\x01", "\x00")
	wantAbsent(t, b, "b", "k3")
	update(t, b, func(tx kv.Tx) error {
		bk, err := bucket(tx, "b") // exists already
		if err != nil {
			return err
		}
		if err := bk.Put([]byte("k1"), []byte("v1'")); err != nil {
			return err
		}
		if err := bk.Delete([]byte("k2")); err != nil {
			return err
		}
		return bk.Delete([]byte("never-there"))
	})
	wantValue(t, b, "b", "k1", "v1'")
	wantAbsent(t, b, "b", "k2")
}

func testReadYourWrites(t *testing.T, b kv.Backend) {
	update(t, b, func(tx kv.Tx) error {
		bk, err := bucket(tx, "b")
		if err != nil {
			return err
		}
		return bk.Put([]byte("old"), []byte("1"))
	})
	update(t, b, func(tx kv.Tx) error {
		bk := tx.Bucket([]byte("b"))
		if err := bk.Put([]byte("new"), []byte("2")); err != nil {
			return err
		}
		if string(bk.Get([]byte("new"))) != "2" {
			t.Fatal("a write is not visible to its own transaction")
		}
		if err := bk.Delete([]byte("old")); err != nil {
			return err
		}
		if bk.Get([]byte("old")) != nil {
			t.Fatal("a delete is not visible to its own transaction")
		}
		var keys []string
		c := bk.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			keys = append(keys, string(k))
		}
		if !slices.Equal(keys, []string{"new"}) {
			t.Fatalf("cursor in the writing transaction sees %q, want [new]", keys)
		}
		nb, err := bucket(tx, "fresh")
		if err != nil {
			return err
		}
		if err := nb.Put([]byte("x"), []byte("y")); err != nil {
			return err
		}
		if tx.Bucket([]byte("fresh")) == nil || string(tx.Bucket([]byte("fresh")).Get([]byte("x"))) != "y" {
			t.Fatal("a bucket created in the transaction is not visible to it")
		}
		return nil
	})
}

func fill(t *testing.T, b kv.Backend, name string, keys ...string) {
	t.Helper()
	update(t, b, func(tx kv.Tx) error {
		bk, err := bucket(tx, name)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := bk.Put([]byte(k), []byte("v"+k)); err != nil {
				return err
			}
		}
		return nil
	})
}

func testCursorOrder(t *testing.T, b kv.Backend) {
	fill(t, b, "c", "d", "b", "a\x00", "a", "c", "e\xff", "aa")
	want := []string{"a", "a\x00", "aa", "b", "c", "d", "e\xff"}
	view(t, b, func(tx kv.Tx) error {
		c := tx.Bucket([]byte("c")).Cursor()
		if fwd, back := walk(t, c); !slices.Equal(fwd, want) || !slices.Equal(back, want) {
			t.Fatalf("forward %q, backward %q, want %q", fwd, back, want)
		}
		for _, tc := range []struct{ seek, want string }{
			{"", "a"}, {"a", "a"}, {"a\x01", "aa"}, {"bb", "c"}, {"e\xff", "e\xff"}, {"f", ""},
		} {
			k, _ := c.Seek([]byte(tc.seek))
			if string(k) != tc.want {
				t.Fatalf("Seek(%q) = %q, want %q", tc.seek, k, tc.want)
			}
		}
		if k, _ := c.Seek([]byte("bb")); string(k) != "c" {
			t.Fatal("Seek")
		}
		if k, _ := c.Prev(); string(k) != "b" {
			t.Fatalf("Prev after Seek = %q, want b", k)
		}
		if k, _ := c.Next(); string(k) != "c" {
			t.Fatalf("Next after Prev = %q, want c", k)
		}
		if k, _ := c.Last(); string(k) != "e\xff" {
			t.Fatal("Last")
		}
		if k, _ := c.Next(); k != nil {
			t.Fatalf("Next past the end = %q", k)
		}
		if k, _ := c.First(); string(k) != "a" {
			t.Fatal("First")
		}
		if k, _ := c.Prev(); k != nil {
			t.Fatalf("Prev before the start = %q", k)
		}
		return nil
	})
	fill(t, b, "empty")
	view(t, b, func(tx kv.Tx) error {
		c := tx.Bucket([]byte("empty")).Cursor()
		if k, _ := c.First(); k != nil {
			t.Fatal("First in an empty bucket")
		}
		if k, _ := c.Last(); k != nil {
			t.Fatal("Last in an empty bucket")
		}
		if k, _ := c.Seek([]byte("x")); k != nil {
			t.Fatal("Seek in an empty bucket")
		}
		return nil
	})
}

// walk returns the keys a cursor gives forward from First and backward
// from Last, each direction in ascending order, checking each value.
func walk(t *testing.T, c kv.Cursor) (fwd, back []string) {
	t.Helper()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if string(v) != "v"+string(k) {
			t.Fatalf("cursor value of %q is %q", k, v)
		}
		fwd = append(fwd, string(k))
	}
	for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
		back = append(back, string(k))
	}
	slices.Reverse(back)
	return fwd, back
}

// testRangeCursor: kv.RangeCursor sees the keys of [lo, hi) and no other,
// in both directions, with Seek, with the transaction's own writes and
// deletes, and stays at the end once a step leaves the range.
func testRangeCursor(t *testing.T, b kv.Backend) {
	fill(t, b, "r", "a", "b", "b\x00", "ba", "bb", "c", "ca", "d")
	for _, tc := range []struct {
		lo, hi []byte
		want   []string
	}{
		{[]byte("b"), []byte("c"), []string{"b", "b\x00", "ba", "bb"}},
		{[]byte("b"), []byte("b\x01"), []string{"b", "b\x00"}},
		{[]byte("ab"), []byte("bb"), []string{"b", "b\x00", "ba"}},
		{[]byte("c"), nil, []string{"c", "ca", "d"}},
		{nil, []byte("b"), []string{"a"}},
		{nil, nil, []string{"a", "b", "b\x00", "ba", "bb", "c", "ca", "d"}},
		{[]byte("bc"), []byte("bd"), nil},
		{[]byte("e"), nil, nil},
		{[]byte("c"), []byte("b"), nil},
	} {
		view(t, b, func(tx kv.Tx) error {
			fwd, back := walk(t, kv.RangeCursor(tx.Bucket([]byte("r")), tc.lo, tc.hi))
			if !slices.Equal(fwd, tc.want) || !slices.Equal(back, tc.want) {
				t.Errorf("[%q, %q): forward %q, backward %q, want %q", tc.lo, tc.hi, fwd, back, tc.want)
			}
			return nil
		})
	}
	view(t, b, func(tx kv.Tx) error {
		c := kv.RangeCursor(tx.Bucket([]byte("r")), []byte("b"), []byte("c"))
		for _, tc := range []struct{ seek, want string }{
			{"", "b"}, {"a", "b"}, {"b\x01", "ba"}, {"bab", "bb"}, {"bb", "bb"}, {"bc", ""}, {"c", ""}, {"z", ""},
		} {
			if k, _ := c.Seek([]byte(tc.seek)); string(k) != tc.want {
				t.Errorf("Seek(%q) in [b, c) = %q, want %q", tc.seek, k, tc.want)
			}
		}
		if k, _ := c.Seek([]byte("bb")); string(k) != "bb" {
			t.Fatalf("Seek(bb) = %q", k)
		}
		if k, _ := c.Next(); k != nil {
			t.Errorf("Next past the range's end = %q", k)
		}
		if k, _ := c.Next(); k != nil {
			t.Errorf("Next again past the range's end = %q", k)
		}
		if k, _ := c.First(); string(k) != "b" {
			t.Fatalf("First = %q", k)
		}
		if k, _ := c.Prev(); k != nil {
			t.Errorf("Prev before the range's start = %q", k)
		}
		if k, _ := c.Last(); string(k) != "bb" {
			t.Errorf("Last = %q", k)
		}
		return nil
	})
	// The transaction's own writes, inside the range and out of it.
	update(t, b, func(tx kv.Tx) error {
		bk := tx.Bucket([]byte("r"))
		for _, k := range []string{"bc", "c\x00", "az"} {
			if err := bk.Put([]byte(k), []byte("v"+k)); err != nil {
				return err
			}
		}
		if err := bk.Delete([]byte("ba")); err != nil {
			return err
		}
		want := []string{"b", "b\x00", "bb", "bc"}
		if fwd, back := walk(t, kv.RangeCursor(bk, []byte("b"), []byte("c"))); !slices.Equal(fwd, want) || !slices.Equal(back, want) {
			t.Errorf("[b, c) with the transaction's writes: forward %q, backward %q, want %q", fwd, back, want)
		}
		// A range whose one key the transaction deleted: stepping past
		// the deletion reaches the range's end exactly.
		if err := bk.Delete([]byte("b\x00")); err != nil {
			return err
		}
		if fwd, back := walk(t, kv.RangeCursor(bk, []byte("b\x00"), []byte("b\x00\x00"))); len(fwd) != 0 || len(back) != 0 {
			t.Errorf("[b\\x00, b\\x00\\x00) after deleting its one key: forward %q, backward %q, want nothing", fwd, back)
		}
		if err := bk.Put([]byte("b\x00"), []byte("vb\x00")); err != nil {
			return err
		}
		return nil
	})
	// Deleting under a bounded cursor, the documented way.
	update(t, b, func(tx kv.Tx) error {
		bk := tx.Bucket([]byte("r"))
		c := kv.RangeCursor(bk, []byte("b"), []byte("c"))
		for k, _ := c.First(); k != nil; {
			if err := bk.Delete(bytes.Clone(k)); err != nil {
				return err
			}
			k, _ = c.Seek(k)
		}
		return nil
	})
	view(t, b, func(tx kv.Tx) error {
		want := []string{"a", "az", "c", "c\x00", "ca", "d"}
		if fwd, _ := walk(t, tx.Bucket([]byte("r")).Cursor()); !slices.Equal(fwd, want) {
			t.Errorf("after deleting [b, c): %q, want %q", fwd, want)
		}
		return nil
	})
}

func testDeleteWhileIterating(t *testing.T, b kv.Backend) {
	var keys []string
	for i := range 50 {
		keys = append(keys, fmt.Sprintf("k%03d", i))
	}
	fill(t, b, "d", keys...)
	update(t, b, func(tx kv.Tx) error {
		bk := tx.Bucket([]byte("d"))
		c := bk.Cursor()
		for k, _ := c.First(); k != nil; {
			var n int
			if _, err := fmt.Sscanf(string(k), "k%03d", &n); err != nil {
				return err
			}
			if n%2 == 0 {
				if err := bk.Delete(bytes.Clone(k)); err != nil {
					return err
				}
				k, _ = c.Seek(k) // the documented way on: Seek to the deleted key
				continue
			}
			k, _ = c.Next()
		}
		return nil
	})
	view(t, b, func(tx kv.Tx) error {
		var left []string
		c := tx.Bucket([]byte("d")).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			left = append(left, string(k))
		}
		if len(left) != 25 || left[0] != "k001" || left[24] != "k049" {
			t.Fatalf("after deleting the even keys: %q", left)
		}
		return nil
	})
}

func testTopLevelCursor(t *testing.T, b kv.Backend) {
	fill(t, b, "beta", "x")
	fill(t, b, "alpha", "x")
	fill(t, b, "gamma", "x")
	view(t, b, func(tx kv.Tx) error {
		var names []string
		c := tx.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			names = append(names, string(k))
		}
		// Other names may exist (a backend's own metadata is not expected,
		// but tolerated only if it sorts outside these).
		var ours []string
		for _, n := range names {
			if n == "alpha" || n == "beta" || n == "gamma" {
				ours = append(ours, n)
			}
		}
		if !slices.Equal(ours, []string{"alpha", "beta", "gamma"}) {
			t.Fatalf("top-level cursor: %q", names)
		}
		if k, _ := c.Seek([]byte("b")); string(k) != "beta" {
			t.Fatalf("top-level Seek(b) = %q", k)
		}
		return nil
	})
}

var errBoom = errors.New("boom")

func testRollback(t *testing.T, b kv.Backend) {
	fill(t, b, "r", "keep")
	err := b.Update(bg, func(tx kv.Tx) error {
		bk := tx.Bucket([]byte("r"))
		if err := bk.Put([]byte("lost"), []byte("x")); err != nil {
			return err
		}
		if err := bk.Delete([]byte("keep")); err != nil {
			return err
		}
		if _, err := bucket(tx, "lost-bucket"); err != nil {
			return err
		}
		// Opened again, the transaction's own bucket exists for it; a
		// backend that remembers buckets seen must not remember this one.
		if tx.Bucket([]byte("lost-bucket")) == nil {
			t.Error("a bucket created in the transaction is not found in it")
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Update returned %v, want the function's error", err)
	}
	wantAbsent(t, b, "r", "lost")
	wantValue(t, b, "r", "keep", "vkeep")
	view(t, b, func(tx kv.Tx) error {
		if tx.Bucket([]byte("lost-bucket")) != nil {
			t.Fatal("a bucket created by a rolled-back transaction exists")
		}
		return nil
	})

	func() {
		defer func() {
			if r := recover(); r != errBoom {
				t.Fatalf("recovered %v, want the function's panic", r)
			}
		}()
		_ = b.Update(bg, func(tx kv.Tx) error {
			if err := tx.Bucket([]byte("r")).Put([]byte("panicked"), []byte("x")); err != nil {
				return err
			}
			panic(errBoom)
		})
		t.Fatal("the panic was swallowed")
	}()
	wantAbsent(t, b, "r", "panicked")
	// The backend still works after a panic.
	fill(t, b, "r", "after")
	wantValue(t, b, "r", "after", "vafter")
}

func testOnCommit(t *testing.T, b kv.Backend) {
	var mu sync.Mutex
	var ran []string
	note := func(s string) func() {
		return func() { mu.Lock(); ran = append(ran, s); mu.Unlock() }
	}
	update(t, b, func(tx kv.Tx) error {
		tx.OnCommit(note("committed"))
		_, err := bucket(tx, "o")
		return err
	})
	_ = b.Update(bg, func(tx kv.Tx) error {
		tx.OnCommit(note("rolled back"))
		return errBoom
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(ran, []string{"committed"}) {
		t.Fatalf("OnCommit ran %q, want only after the commit", ran)
	}
}

func testSequence(t *testing.T, b kv.Backend) {
	var last uint64
	for range 3 {
		update(t, b, func(tx kv.Tx) error {
			bk, err := bucket(tx, "s")
			if err != nil {
				return err
			}
			for range 2 {
				n, err := bk.NextSequence()
				if err != nil {
					return err
				}
				if n <= last {
					t.Fatalf("NextSequence went from %d to %d", last, n)
				}
				last = n
			}
			return nil
		})
	}
	committed := last
	_ = b.Update(bg, func(tx kv.Tx) error {
		n, err := tx.Bucket([]byte("s")).NextSequence()
		if err != nil {
			return err
		}
		if n <= committed {
			t.Fatalf("NextSequence %d after %d", n, committed)
		}
		return errBoom
	})
	update(t, b, func(tx kv.Tx) error {
		n, err := tx.Bucket([]byte("s")).NextSequence()
		if err != nil {
			return err
		}
		if n <= committed {
			t.Fatalf("NextSequence %d after a rollback, last committed %d", n, committed)
		}
		return nil
	})
}

func testReadOnly(t *testing.T, b kv.Backend) {
	fill(t, b, "ro", "k")
	err := b.View(bg, func(tx kv.Tx) error {
		if tx.Writable() {
			t.Fatal("a View transaction says it is writable")
		}
		bk := tx.Bucket([]byte("ro"))
		for what, err := range map[string]error{
			"Delete":                  bk.Delete([]byte("k")),
			"Put with an empty key":   bk.Put(nil, []byte("v")),
			"CreateBucketIfNotExists": func() error { _, err := tx.CreateBucketIfNotExists([]byte("ro")); return err }(),
		} {
			if !errors.Is(err, kv.ErrTxNotWritable) {
				t.Errorf("%s in a View transaction: %v, want kv.ErrTxNotWritable", what, err)
			}
		}
		return bk.Put([]byte("k"), []byte("changed"))
	})
	if !errors.Is(err, kv.ErrTxNotWritable) {
		t.Fatalf("a write in a View transaction: %v, want kv.ErrTxNotWritable", err)
	}
	wantValue(t, b, "ro", "k", "vk")
	update(t, b, func(tx kv.Tx) error {
		if !tx.Writable() {
			t.Fatal("an Update transaction says it is read-only")
		}
		return nil
	})
}

func testSnapshot(t *testing.T, b kv.Backend) {
	fill(t, b, "snap", "k")
	read := make(chan struct{})
	written := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.View(bg, func(tx kv.Tx) error {
			bk := tx.Bucket([]byte("snap"))
			first := string(bk.Get([]byte("k")))
			close(read)
			<-written
			if again := string(bk.Get([]byte("k"))); again != first {
				return fmt.Errorf("a read transaction saw a later commit: %q then %q", first, again)
			}
			if k, _ := bk.Cursor().Seek([]byte("later")); k != nil {
				return fmt.Errorf("a read transaction's cursor saw a key committed after it began: %q", k)
			}
			return nil
		})
	}()
	<-read
	update(t, b, func(tx kv.Tx) error {
		bk := tx.Bucket([]byte("snap"))
		if err := bk.Put([]byte("k"), []byte("new")); err != nil {
			return err
		}
		return bk.Put([]byte("later"), []byte("x"))
	})
	close(written)
	must(t, <-done)
	wantValue(t, b, "snap", "k", "new")
}

func testLargeValue(t *testing.T, b kv.Backend) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16) // 64 KiB
	update(t, b, func(tx kv.Tx) error {
		bk, err := bucket(tx, "big")
		if err != nil {
			return err
		}
		return bk.Put([]byte("v"), big)
	})
	view(t, b, func(tx kv.Tx) error {
		if !bytes.Equal(tx.Bucket([]byte("big")).Get([]byte("v")), big) {
			t.Fatal("a 64 KiB value did not round-trip")
		}
		return nil
	})
}

// testKeyLimits: an empty key or bucket name, and a key longer than
// kv.MaxKeySize, are refused with the same errors on every backend, write
// nothing, and leave the transaction usable; a key of exactly MaxKeySize
// bytes is stored.
func testKeyLimits(t *testing.T, b kv.Backend) {
	longest := bytes.Repeat([]byte{'k'}, kv.MaxKeySize)
	update(t, b, func(tx kv.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(nil); !errors.Is(err, kv.ErrBucketNameRequired) {
			t.Errorf("an empty bucket name: %v, want kv.ErrBucketNameRequired", err)
		}
		bk, err := bucket(tx, "limits")
		if err != nil {
			return err
		}
		if err := bk.Put(nil, []byte("v")); !errors.Is(err, kv.ErrKeyRequired) {
			t.Errorf("an empty key: %v, want kv.ErrKeyRequired", err)
		}
		if err := bk.Put(append(longest, 'k'), []byte("v")); !errors.Is(err, kv.ErrKeyTooLarge) {
			t.Errorf("a key of %d bytes: %v, want kv.ErrKeyTooLarge", len(longest)+1, err)
		}
		return bk.Put(longest, []byte("v"))
	})
	view(t, b, func(tx kv.Tx) error {
		var keys [][]byte
		c := tx.Bucket([]byte("limits")).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			keys = append(keys, k)
		}
		if len(keys) != 1 || !bytes.Equal(keys[0], longest) {
			t.Errorf("the bucket holds %d keys, want only the one of %d bytes", len(keys), len(longest))
		}
		return nil
	})
}

// concurrently runs fn from workers goroutines, n times each, and fails the
// test on the first error.
func concurrently(t *testing.T, workers, n int, fn func(w, i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				if err := fn(w, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testNoLostUpdates(t *testing.T, b kv.Backend) {
	fill(t, b, "ctr")
	const workers, n = 6, 15
	concurrently(t, workers, n, func(_, _ int) error {
		return b.Update(bg, func(tx kv.Tx) error {
			bk := tx.Bucket([]byte("ctr"))
			var c int
			if v := bk.Get([]byte("n")); v != nil {
				if _, err := fmt.Sscan(string(v), &c); err != nil {
					return err
				}
			}
			return bk.Put([]byte("n"), fmt.Appendf(nil, "%d", c+1))
		})
	})
	wantValue(t, b, "ctr", "n", fmt.Sprint(workers*n))
}

// testNoPhantoms: each transaction counts the keys of a bucket with a cursor
// and adds one only while fewer than limit exist. A backend that does not
// detect a concurrent insert into a scanned range lets the count overshoot.
func testNoPhantoms(t *testing.T, b kv.Backend) {
	noPhantoms(t, b, "slots", "w", nil, func(bk kv.Bucket) kv.Cursor { return bk.Cursor() })
}

// testNoPhantomsInRange is testNoPhantoms for a bounded scan
// (kv.RangeCursor) in a bucket where other writers insert around the
// range at the same time: an insert into the range must still refuse a
// concurrent scan of it.
func testNoPhantomsInRange(t *testing.T, b kv.Backend) {
	noPhantoms(t, b, "ranged", "m-", []string{"a-", "n-"}, func(bk kv.Bucket) kv.Cursor {
		return kv.RangeCursor(bk, []byte("m"), []byte("n"))
	})
}

// noPhantoms: concurrent transactions each count the keys scan walks in
// bucket name and insert one more (its name beginning with in) while
// fewer than a limit; each first writes a key beginning with every
// prefix of around (outside what scan walks). A backend that misses an
// insert into a range scanned ends with more than the limit.
func noPhantoms(t *testing.T, b kv.Backend, name, in string, around []string, scan func(kv.Bucket) kv.Cursor) {
	fill(t, b, name)
	const workers, limit = 6, 10
	count := func(bk kv.Bucket) int {
		n := 0
		c := scan(bk)
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		return n
	}
	concurrently(t, workers, 4, func(w, i int) error {
		return b.Update(bg, func(tx kv.Tx) error {
			bk := tx.Bucket([]byte(name))
			for _, p := range around {
				if err := bk.Put(fmt.Appendf(nil, "%s%d-%d", p, w, i), []byte("x")); err != nil {
					return err
				}
			}
			if count(bk) >= limit {
				return nil
			}
			return bk.Put(fmt.Appendf(nil, "%s%d-%d", in, w, i), []byte("x"))
		})
	})
	view(t, b, func(tx kv.Tx) error {
		if n := count(tx.Bucket([]byte(name))); n != limit {
			t.Fatalf("%d keys after concurrent bounded inserts, want exactly %d (a phantom went undetected)", n, limit)
		}
		return nil
	})
}

// testNoDeletedRangeRace: exactly one of the keys "a" and "b" exists; each
// transaction finds it with a cursor scan and flips it to the other. A
// backend that misses a deletion inside a scanned range ends with both or
// neither.
func testNoDeletedRangeRace(t *testing.T, b kv.Backend) {
	fill(t, b, "flip", "a")
	concurrently(t, 6, 10, func(_, _ int) error {
		return b.Update(bg, func(tx kv.Tx) error {
			bk := tx.Bucket([]byte("flip"))
			k, _ := bk.Cursor().First()
			if k == nil {
				return errors.New("both keys vanished")
			}
			cur := string(k)
			next := map[string]string{"a": "b", "b": "a"}[cur]
			if err := bk.Delete([]byte(cur)); err != nil {
				return err
			}
			return bk.Put([]byte(next), []byte("v"+next))
		})
	})
	view(t, b, func(tx kv.Tx) error {
		var keys []string
		c := tx.Bucket([]byte("flip")).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			keys = append(keys, string(k))
		}
		if len(keys) != 1 {
			t.Fatalf("keys after concurrent flips: %q, want exactly one", keys)
		}
		return nil
	})
}

// testThroughDB runs the backend under kv.New: the format record is
// stamped, reserved names are refused, Batch commits.
func testThroughDB(t *testing.T, b kv.Backend) {
	db, err := kv.New(nopClose{b}, nil)
	must(t, err)
	defer func() { _ = db.Close() }()
	must(t, db.View(bg, func(tx kv.Tx) error {
		meta := keyspace.Raw(tx).Bucket([]byte(record.MetaBucket))
		if meta == nil {
			t.Fatal("no format record")
		}
		v, err := record.DecodeFormat(meta.Get(record.FormatKey))
		if err != nil {
			return err
		}
		if v != kv.FormatVersion {
			t.Fatalf("stored format %d, want %d", v, kv.FormatVersion)
		}
		return nil
	}))
	err = db.Update(bg, func(tx kv.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte(record.ReservedPrefix + "x"))
		return err
	})
	if !errors.Is(err, kv.ErrReservedName) {
		t.Fatalf("creating a reserved bucket: %v, want kv.ErrReservedName", err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			err := db.Batch(bg, func(tx kv.Tx) error {
				bk, err := bucket(tx, "batch")
				if err != nil {
					return err
				}
				return bk.Put(fmt.Appendf(nil, "%d", i), []byte("x"))
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	must(t, db.View(bg, func(tx kv.Tx) error {
		n := 0
		c := tx.Bucket([]byte("batch")).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		if n != 8 {
			t.Fatalf("%d of 8 batched writes committed", n)
		}
		return nil
	}))
	problems, err := db.Check(bg)
	must(t, err)
	if len(problems) > 0 {
		t.Fatalf("check: %v", problems)
	}
}

// nopClose keeps the suite's own Close of the backend the only one.
type nopClose struct{ kv.Backend }

func (nopClose) Close() error { return nil }
