package recstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
)

// The identities the model test writes. ("a", "bc") and ("ab", "c") join
// to the same bytes; the empty key and a key with a NUL are kept apart as
// well.
var modelIDs = [...][2]string{
	{"a", "bc"}, {"ab", "c"}, {"a", ""}, {"a", "x\x00y"},
	{"ab", "bc"}, {"ab", ""}, {"", "c"}, {"a", "c"},
}

type modelRec struct {
	v   []byte
	exp time.Time
}

// modelRun plays ops (a fuzzer's bytes) against the log store and a map,
// and fails t as soon as the store answers anything the map does not
// hold. In the log layout the directory's hash is narrowed to two bits,
// so most identities share a hash with others and every hit must be
// verified.
type modelRun struct {
	t     *testing.T
	path  string
	keyed bool // the keyed layout (as on etcd) instead of the log
	// uncached turns the cache of recent entries off (the log layout
	// with kv.Options.RecentCacheBytes negative).
	uncached bool
	db       *kv.DB
	s        Store
	model    map[[2]string]modelRec
	ver      int
}

// modelLayout is a store the model plays against: the log, the log with
// its cache of recent entries off, or the keyed layout.
type modelLayout int

const (
	modelLog modelLayout = iota
	modelUncached
	modelKeyed
)

var modelLayouts = []modelLayout{modelLog, modelUncached, modelKeyed}

// modelMask leaves four hashes for the eight identities.
const modelMask = 3

func (m *modelRun) open() {
	opts := &kv.Options{NoSync: true}
	if m.uncached {
		opts.RecentCacheBytes = -1
	}
	db, err := kv.Open(m.path, opts)
	if err != nil {
		m.t.Fatal(err)
	}
	m.db, m.s = db, Keyed(spec)
	if m.keyed {
		return
	}
	d := newDirectory(0)
	d.mask = modelMask
	if m.s, err = openLog(ctx, db, spec, d); err != nil {
		m.t.Fatal(err)
	}
}

// next returns a new value for id, size bytes of padding after its name
// and a version, so that every value written is distinct.
func (m *modelRun) next(id int, size int) []byte {
	m.ver++
	var e record.Encoder
	e.Reset(record.KindInbox, 1)
	e.String(fmt.Sprintf("%d/%d", id, m.ver))
	e.Fixed(bytes.Repeat([]byte{byte(m.ver)}, size))
	return e.Finish()
}

// put writes a new value for id in tx and returns it (and what the model
// holds after tx commits).
func (m *modelRun) put(ctx context.Context, tx kv.Tx, pending map[[2]string]modelRec, id int, exp time.Time, size int) error {
	sc, k := modelIDs[id][0], modelIDs[id][1]
	ref, cur, err := m.s.Get(tx, sc, k)
	if err != nil {
		return err
	}
	prev, had := pending[modelIDs[id]]
	if had != (cur != nil) || had && !bytes.Equal(cur, prev.v) {
		m.t.Fatalf("in the transaction, Get(%q, %q) = %.16q, want %.16q (present %t)", sc, k, cur, prev.v, had)
	}
	v := m.next(id, size)
	if _, err := m.s.Put(ctx, tx, sc, k, ref, prev.exp, exp, v); err != nil {
		return err
	}
	pending[modelIDs[id]] = modelRec{v: v, exp: exp}
	// Read your own write, through the directory, in the same transaction.
	if _, got, err := m.s.Get(tx, sc, k); err != nil || !bytes.Equal(got, v) {
		m.t.Fatalf("after Put in the transaction, Get(%q, %q) = %.16q, %v; want %.16q", sc, k, got, err, v)
	}
	return nil
}

func (m *modelRun) del(tx kv.Tx, pending map[[2]string]modelRec, id int) error {
	sc, k := modelIDs[id][0], modelIDs[id][1]
	ref, cur, err := m.s.Get(tx, sc, k)
	if err != nil || cur == nil {
		return err
	}
	if err := m.s.Delete(tx, sc, k, ref, pending[modelIDs[id]].exp); err != nil {
		return err
	}
	delete(pending, modelIDs[id])
	if _, got, err := m.s.Get(tx, sc, k); err != nil || got != nil {
		m.t.Fatalf("after Delete in the transaction, Get(%q, %q) = %.16q, %v; want nothing", sc, k, got, err)
	}
	return nil
}

func (m *modelRun) pending() map[[2]string]modelRec {
	p := make(map[[2]string]modelRec, len(m.model))
	for k, v := range m.model {
		p[k] = v
	}
	return p
}

// check compares every identity's answers with the model: a read
// transaction's Get, and Probe with Cached (a miss is final, a cached
// value is the record).
func (m *modelRun) check(step int) {
	m.t.Helper()
	err := m.db.View(ctx, func(tx kv.Tx) error {
		for _, id := range modelIDs {
			want, ok := m.model[id]
			_, got, err := m.s.Get(tx, id[0], id[1])
			if err != nil {
				return err
			}
			if ok != (got != nil) || !bytes.Equal(got, want.v) {
				return fmt.Errorf("Get(%q, %q) = %.16q, want %.16q (present %t)", id[0], id[1], got, want.v, ok)
			}
			p, maybe := m.s.Probe(id[0], id[1])
			if !maybe {
				if ok {
					return fmt.Errorf("Probe(%q, %q) says absent; the record is there", id[0], id[1])
				}
				continue
			}
			if _, v, cached := m.s.Cached(ctx, p, id[0], id[1]); cached && !bytes.Equal(v, want.v) {
				return fmt.Errorf("Cached(%q, %q) = %.16q, want %.16q (present %t)", id[0], id[1], v, want.v, ok)
			}
			if _, got, err := m.s.GetProbed(tx, id[0], id[1], p); err != nil || !bytes.Equal(got, want.v) {
				return fmt.Errorf("GetProbed(%q, %q) = %.16q, %v; want %.16q", id[0], id[1], got, err, want.v)
			}
		}
		n := 0
		m.s.Scan(tx, "", func(_ Ref, _, _ string, _ []byte, ok bool) bool {
			if !ok {
				m.t.Errorf("Scan met an unreadable entry")
			}
			n++
			return true
		})
		if n != len(m.model) {
			return fmt.Errorf("Scan found %d records, the model holds %d", n, len(m.model))
		}
		return nil
	})
	if err != nil {
		m.t.Fatalf("after step %d: %v", step, err)
	}
}

var errModelRollback = errors.New("roll back")

// playModel runs ops; each op takes the bytes after it as arguments (0
// when the input ends).
func playModel(t *testing.T, ops []byte, l modelLayout) {
	m := &modelRun{t: t, path: filepath.Join(t.TempDir(), "m.db"), model: map[[2]string]modelRec{},
		keyed: l == modelKeyed, uncached: l == modelUncached}
	m.open()
	defer func() { _ = m.db.Close() }()
	arg := func() int {
		if len(ops) == 0 {
			return 0
		}
		b := ops[0]
		ops = ops[1:]
		return int(b)
	}
	exp := func(a int) time.Time { return t0.Add(time.Duration(a%4) * time.Second) }
	size := func(a int) int { return a * 13 % 2600 } // some go past half a page: straight to the log
	for step := 0; len(ops) > 0 && step < 64; step++ {
		op := arg()
		switch op % 8 {
		case 0, 7: // one or several writes, committed
			n := 1 + op/8%4
			args := make([][3]int, n)
			for i := range args {
				args[i] = [3]int{arg(), arg(), arg()}
			}
			var p map[[2]string]modelRec
			err := m.db.Update(ctx, func(tx kv.Tx) error {
				p = m.pending() // each run from the model (a rerun build runs it twice)
				for _, a := range args {
					if a[0]&0x80 != 0 {
						if err := m.del(tx, p, a[0]%len(modelIDs)); err != nil {
							return err
						}
						continue
					}
					if err := m.put(ctx, tx, p, a[0]%len(modelIDs), exp(a[1]), size(a[2])); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			m.model = p
		case 1: // a caller's own bbolt transaction (the Tx forms), rolled back
			id, e, sz, id2 := arg(), arg(), arg(), arg()
			p := m.pending()
			err := m.db.Bolt().Update(func(btx *bolt.Tx) error {
				tx := kv.WrapTx(btx)
				if err := m.put(ctx, tx, p, id%len(modelIDs), exp(e), size(sz)); err != nil {
					return err
				}
				if err := m.del(tx, p, id2%len(modelIDs)); err != nil {
					return err
				}
				return errModelRollback
			})
			if !errors.Is(err, errModelRollback) {
				t.Fatal(err)
			}
		case 2, 3: // a managed call: its first run rolled back (group commit retries it), the second commits or fails
			id, e, sz := arg(), arg(), arg()
			j := &Journal{}
			jctx := WithJournal(ctx, j)
			run := func(commit bool) map[[2]string]modelRec {
				var p map[[2]string]modelRec
				err := m.db.Update(ctx, func(tx kv.Tx) error {
					j.Undo()        // an earlier run that did not commit
					p = m.pending() // each run from the model (a rerun build runs it twice)
					if err := m.put(jctx, tx, p, id%len(modelIDs), exp(e), size(sz)); err != nil {
						return err
					}
					if !commit {
						return errModelRollback
					}
					return nil
				})
				if commit && err != nil || !commit && !errors.Is(err, errModelRollback) {
					t.Fatal(err)
				}
				return p
			}
			run(false)
			if op%8 == 2 {
				m.model = run(true)
				j.Committed()
			} else {
				j.Undo()
			}
		case 4: // a sweep: every record expiring at or before a second
			before := exp(arg())
			var p map[[2]string]modelRec
			err := m.db.Update(ctx, func(tx kv.Tx) error {
				p = m.pending() // each run from the model (a rerun build runs it twice)
				type due struct {
					ref    Ref
					sc, k  string
					expiry time.Time
				}
				var dues []due
				m.s.Scan(tx, "", func(ref Ref, sc, k string, _ []byte, ok bool) bool {
					if r, in := p[[2]string{sc, k}]; ok && in && !r.exp.After(before) {
						dues = append(dues, due{ref, sc, k, r.exp})
					}
					return true
				})
				for _, d := range dues {
					if err := m.s.Delete(tx, d.sc, d.k, d.ref, d.expiry); err != nil {
						return err
					}
					delete(p, [2]string{d.sc, d.k})
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			m.model = p
		case 5: // close and open: the directory is rebuilt from the file
			if err := m.db.Close(); err != nil {
				t.Fatal(err)
			}
			m.open()
		case 6: // the tail moved to the log now
			err := m.db.Update(ctx, func(tx kv.Tx) error { return FlushTail(tx, spec) })
			if err != nil {
				t.Fatal(err)
			}
		}
		m.check(step)
	}
}

// FuzzStoreAgainstAModel plays random sequences of writes, deletes,
// rolled-back caller transactions, retried managed calls, sweeps, reopens
// and tail moves against the log store, with a directory whose hash
// leaves most identities colliding, and checks after every step that each
// identity's record is the model's: no stale directory entry, rolled-back
// write, moved or swept record, or colliding identity is ever answered.
// The keyed layout plays the same steps.
func FuzzStoreAgainstAModel(f *testing.F) {
	f.Add([]byte{0, 0, 1, 10, 0, 1, 2, 20, 8, 3, 2, 30, 4, 3, 5, 1, 1, 1, 1})
	f.Add([]byte{7, 0, 0, 200, 1, 1, 200, 2, 2, 200, 3, 3, 200, 6, 5, 4, 3})
	f.Add([]byte{2, 1, 1, 1, 3, 2, 2, 2, 0, 1, 3, 3, 0x81, 0, 0, 5, 2, 1, 0, 0})
	f.Add([]byte{31, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 31, 4, 1, 0, 5, 1, 0, 6, 1, 0, 7, 1, 0, 4, 2, 5})
	f.Fuzz(func(t *testing.T, ops []byte) {
		for _, l := range modelLayouts {
			playModel(t, ops, l)
		}
	})
}

// A fixed long sequence, so that the plain test run covers the same
// paths as the fuzzer's seeds with more steps.
func TestStoreAgainstAModel(t *testing.T) {
	t.Parallel()
	ops := make([]byte, 0, 512)
	x := uint32(1)
	for len(ops) < cap(ops) {
		x = x*1664525 + 1013904223
		ops = append(ops, byte(x>>24))
	}
	for _, l := range modelLayouts {
		playModel(t, ops, l)
	}
}
