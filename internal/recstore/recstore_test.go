package recstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	ctx     = context.Background()
	spec    = Spec{Name: "test"}
	t0      = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	errBoom = errors.New("errBoom")
)

func open(t *testing.T) (*kv.DB, *logStore) {
	t.Helper()
	db, err := kv.Open(filepath.Join(t.TempDir(), "r.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := Open(ctx, db, spec)
	require.NoError(t, err)
	return db, s.(*logStore)
}

func value(s string) []byte {
	var e record.Encoder
	e.Reset(record.KindInbox, 1)
	e.String(s)
	return e.Finish()
}

// get looks (scope, key) up in a read transaction.
func get(t *testing.T, db *kv.DB, s Store, scope, key string) []byte {
	t.Helper()
	var out []byte
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		_, v, err := s.Get(tx, scope, key)
		out = append([]byte(nil), v...)
		if v == nil {
			out = nil
		}
		return err
	}))
	return out
}

func put(t *testing.T, db *kv.DB, s Store, scope, key string, exp time.Time, v []byte) {
	t.Helper()
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, _, err := s.Get(tx, scope, key)
		if err != nil {
			return err
		}
		_, err = s.Put(ctx, tx, scope, key, ref, time.Time{}, exp, v)
		return err
	}))
}

func positions(s *logStore) int { n, _ := s.dir.len(); return n }

// A record written, replaced at another expiry (it moves) and deleted is
// found, found at its new place, and gone; the directory holds exactly the
// live positions after each commit.
func TestLogPutMoveDelete(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "k", t0, value("v1"))
	require.Equal(t, value("v1"), get(t, db, s, "a", "k"))
	require.Nil(t, get(t, db, s, "a", "other"))
	require.Equal(t, 1, positions(s))

	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, _, err := s.Get(tx, "a", "k")
		require.NoError(t, err)
		moved, err := s.Put(ctx, tx, "a", "k", ref, t0, t0.Add(time.Hour), value("v2"))
		require.NotEqual(t, ref.pos, moved.pos, "a later expiry is a later place in the log")
		return err
	}))
	require.Equal(t, value("v2"), get(t, db, s, "a", "k"))
	require.Equal(t, 1, positions(s), "the old position is forgotten after the commit")

	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, _, err := s.Get(tx, "a", "k")
		require.NoError(t, err)
		return s.Delete(tx, "a", "k", ref, t0.Add(time.Hour))
	}))
	require.Nil(t, get(t, db, s, "a", "k"))
	require.Equal(t, 0, positions(s))
}

// A caller's own transaction that rolls back leaves an entry behind (oncekv
// never sees the rollback), but no answer: the hit is verified against the
// record, which is not there. A managed run's journal removes its entries.
func TestRolledBackWritesLeaveNoAnswer(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	err := db.Bolt().Update(func(btx *bolt.Tx) error {
		_, err := s.Put(ctx, kv.WrapTx(btx), "a", "k", Ref{}, time.Time{}, t0, value("lost"))
		require.NoError(t, err)
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.Nil(t, get(t, db, s, "a", "k"), "a rolled-back record is not found")
	require.Equal(t, 1, positions(s), "the stale hint stays until the next write")
	put(t, db, s, "a", "k", t0, value("real"))
	require.Equal(t, value("real"), get(t, db, s, "a", "k"))
	require.Equal(t, 1, positions(s), "the next write removed the stale hint")

	j := &Journal{}
	jctx := WithJournal(ctx, j)
	err = db.Update(jctx, func(tx kv.Tx) error {
		_, err := s.Put(jctx, tx, "b", "k", Ref{}, time.Time{}, t0, value("lost"))
		require.NoError(t, err)
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	before := positions(s)
	j.Undo()
	require.Equal(t, before-1, positions(s), "the journal removed the rolled-back entry")
	require.Nil(t, get(t, db, s, "b", "k"))

	// More entries than the journal keeps in itself: all of them go.
	err = db.Update(jctx, func(tx kv.Tx) error {
		for _, k := range []string{"c1", "c2", "c3"} {
			_, err := s.Put(jctx, tx, "c", k, Ref{}, time.Time{}, t0, value("lost"))
			require.NoError(t, err)
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	before = positions(s)
	j.Undo()
	require.Equal(t, before-3, positions(s), "the journal removed every rolled-back entry")
}

// A directory entry that points at another key's record (a hash collision,
// or a stale position) is never trusted: the look-up compares the key.
func TestHitsAreVerified(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "x", t0, value("x"))
	var xpos uint64
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		ref, _, err := s.Get(tx, "a", "x")
		xpos = ref.pos
		return err
	}))
	// Pretend "a"/"y" hashes where "a"/"x" lives.
	s.dir.add(s.dir.hash("a", "y"), xpos)
	require.Nil(t, get(t, db, s, "a", "y"), "another key's record is not an answer")
	put(t, db, s, "a", "y", t0, value("y"))
	require.Equal(t, value("y"), get(t, db, s, "a", "y"), "the real record is found behind the false hint")
	require.Equal(t, value("x"), get(t, db, s, "a", "x"))
}

// A probe made before a read transaction may be stale by the time it
// starts: the record moved (a later expiry), or the probe points at
// another key's record. The look-up verifies what it finds where the probe
// points and otherwise looks afresh, so it returns the record the
// transaction sees, and a probe never makes a record appear.
func TestStaleProbesAreVerified(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "k", t0, value("v1"))
	put(t, db, s, "a", "other", t0, value("other"))
	probe, ok := s.Probe("a", "k")
	require.True(t, ok)
	_, ok = s.Probe("a", "never")
	require.False(t, ok, "a key never written needs no look")

	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error { // the record moves after the probe
		ref, _, err := s.Get(tx, "a", "k")
		require.NoError(t, err)
		moved, err := s.Put(ctx, tx, "a", "k", ref, t0, t0.Add(time.Hour), value("v2"))
		require.NotEqual(t, probe.pos, moved.pos)
		return err
	}))
	getProbed := func(key string, p Probe) []byte {
		var out []byte
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			_, v, err := s.GetProbed(tx, "a", key, p)
			out = append(out[:0], v...)
			return err
		}))
		return out
	}
	require.Equal(t, value("v2"), getProbed("k", probe), "found at its new place, not lost behind the old one")

	otherProbe, _ := s.Probe("a", "other")
	require.Equal(t, value("v2"), getProbed("k", otherProbe), "another key's record is not an answer")
	require.Nil(t, getProbed("missing", otherProbe))
	require.Equal(t, value("other"), getProbed("other", otherProbe))
}

// A damaged entry where a look-up leads is an error naming the record,
// through Get and through a probe made before the damage, whether the
// damage is in its key (which then no longer matches) or in its value
// (the key matches; only the checksum tells): a miss would run the work
// again, a match trusted unchecked could be another key's record.
func TestDamagedEntryIsAnError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		at   func(v []byte) int
		why  string // what List, and the look-up's error, say of it
	}{
		{"in the key's length", func([]byte) int { return 5 }, "unreadable framing"},
		{"in the key", func([]byte) int { return 6 }, "checksum mismatch"},
		{"in the value", func(v []byte) int { return len(v) - 6 }, "checksum mismatch"},
	} {
		db, s := open(t)
		put(t, db, s, "a", "k", t0, value("v"))
		p, ok := s.Probe("a", "k")
		require.True(t, ok)
		require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
			require.NoError(t, FlushTail(kv.WrapTx(btx), spec))
			b := btx.Bucket(LogBucket(spec))
			k, v := b.Cursor().First()
			bad := append([]byte(nil), v...)
			bad[c.at(bad)] ^= 0xff
			return b.Put(append([]byte(nil), k...), bad)
		}))
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			_, v, err := s.Get(tx, "a", "k")
			require.ErrorIs(t, err, record.ErrCorrupt, c.name)
			require.ErrorContains(t, err, `"a"/"k"`, c.name)
			require.ErrorContains(t, err, "("+c.why+")", c.name)
			require.Nil(t, v, c.name)
			_, v, err = s.GetProbed(tx, "a", "k", p)
			require.ErrorIs(t, err, record.ErrCorrupt, "%s, probed", c.name)
			require.Nil(t, v, c.name)
			// A listing reports the damage, with the identity as it reads;
			// Scan, which counts, takes the entry for what it says.
			var listed, scanned []bool
			s.List(tx, "", func(_ Ref, _, _ string, v []byte, ok bool) bool {
				listed = append(listed, ok)
				require.Equal(t, c.why, why(v), c.name)
				return true
			})
			s.Scan(tx, "", func(_ Ref, _, _ string, _ []byte, ok bool) bool { scanned = append(scanned, ok); return true })
			require.Equal(t, []bool{false}, listed, c.name)
			require.Equal(t, []bool{c.why == "checksum mismatch"}, scanned, c.name)
			return nil
		}))
	}
}

// A damaged entry whose key was changed into another record's (one bit:
// "j" into "k") is passed over when that record's own entry is intact:
// the look-up answers with the intact one, whichever the directory holds
// first. The directory's hash is narrowed to nothing, so both are
// candidates of both keys.
func TestDamagedEntryBesideAnIntactOne(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "r.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	d := newDirectory(0)
	d.mask = 0
	s, err := openLog(ctx, db, spec, d)
	require.NoError(t, err)
	put(t, db, s, "a", "j", t0, value("j's"))
	put(t, db, s, "a", "k", t0, value("k's"))
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		require.NoError(t, FlushTail(kv.WrapTx(btx), spec))
		b := btx.Bucket(LogBucket(spec))
		k, v := b.Cursor().First() // j's, written first
		_, key, _, ok := unwrap(v)
		require.True(t, ok)
		require.Equal(t, "j", string(key))
		bad := append([]byte(nil), v...)
		bad[3+1+1+1] ^= 'j' ^ 'k' // header, scope "a" and the key's length, then the key
		_, key, _, ok = unwrap(bad)
		require.True(t, ok)
		require.Equal(t, "k", string(key))
		return b.Put(append([]byte(nil), k...), bad)
	}))
	require.Equal(t, value("k's"), get(t, db, s, "a", "k"), "k's own entry, not j's damaged one")
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		_, _, err := s.Get(tx, "a", "j")
		require.ErrorIs(t, err, record.ErrCorrupt, "j's entry is damaged: an error, not a miss")
		return nil
	}))
}

// damageAndReopen writes two records at one expiry, changes the second
// one's entry (the higher counter) through change, and reopens the file:
// the store returned has rebuilt its directory from the damaged log.
func damageAndReopen(t *testing.T, change func(v []byte) []byte) (*kv.DB, *logStore, []byte) {
	t.Helper()
	var damagedAt []byte
	db, s := changeAndReopen(t, func(b *bolt.Bucket) error {
		k, v := b.Cursor().Last() // k's
		damagedAt = append([]byte(nil), k...)
		return b.Put(damagedAt, change(append([]byte(nil), v...)))
	})
	return db, s, damagedAt
}

// changeAndReopen writes two records at one expiry ("a"/"j" and "a"/"k"),
// moves them to the log, changes the log through change (raw bbolt), and
// reopens the file: the store returned has rebuilt its directory from
// the changed log.
func changeAndReopen(t *testing.T, change func(log *bolt.Bucket) error) (*kv.DB, *logStore) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	s, err := Open(ctx, db, spec)
	require.NoError(t, err)
	put(t, db, s, "a", "j", t0, value("j's"))
	put(t, db, s, "a", "k", t0, value("k's"))
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		require.NoError(t, FlushTail(kv.WrapTx(btx), spec))
		return change(btx.Bucket(LogBucket(spec)))
	}))
	require.NoError(t, db.Close())
	db, err = kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s2, err := Open(ctx, db, spec)
	require.NoError(t, err)
	return db, s2.(*logStore)
}

// An entry cut short keeps the scope and key at its start: the rebuild
// indexes it under them, and a look-up of that key meets the damage (an
// error) instead of missing it (which would run the work again).
func TestAnEntryCutShortIsStillFound(t *testing.T) {
	t.Parallel()
	db, s, _ := damageAndReopen(t, func(v []byte) []byte {
		_, _, ok := identity(v[:3+1+1+1+1])
		require.True(t, ok, "the identity survives the cut")
		return v[:3+1+1+1+1+2] // header, "a" and "k" with their lengths, two bytes of the value
	})
	require.Equal(t, 1, s.Stats().Unreadable)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		_, v, err := s.Get(tx, "a", "k")
		require.ErrorIs(t, err, record.ErrCorrupt)
		require.Nil(t, v)
		return nil
	}))
	require.Equal(t, value("j's"), get(t, db, s, "a", "j"))
}

// A damaged entry's position is never handed out again: the rebuild
// starts the counter above every position in the log, readable or not,
// so a new record of the same second does not write over the damage (and
// the check can still report it).
func TestADamagedEntryKeepsItsPosition(t *testing.T) {
	t.Parallel()
	db, s, damagedAt := damageAndReopen(t, func(v []byte) []byte {
		v[3] = 0xff // the scope's length: nothing can be read
		return v
	})
	st := s.Stats()
	require.Equal(t, 1, st.Unreadable)
	require.Equal(t, 1, st.Rebuilt, "only j's entry says whose it is")
	require.Equal(t, 1, st.Positions, "an entry that names no key is not in the directory")
	put(t, db, s, "a", "m", t0, value("m's"))
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		ref, v, err := s.Get(tx, "a", "m")
		require.NoError(t, err)
		require.Equal(t, value("m's"), v)
		require.NotEqual(t, damagedAt, ref.Cursor(), "the new record took the damaged entry's position")
		_, _, mine, _ := unwrap(s.both(tx).Get(ref.Cursor()))
		require.Equal(t, value("m's"), mine, "the Ref's cursor locates the new record")
		still := s.both(tx).Get(damagedAt)
		require.NotNil(t, still)
		_, _, _, ok := unwrap(still)
		require.False(t, ok, "the damaged entry is still there, as it was")
		return nil
	}))
}

// A rebuild goes on past a key in the log that is not a position (a
// damaged page's, or one written by hand): it is counted as unreadable,
// takes no place in the directory, and the entries after it are found.
func TestRebuildGoesOnPastWhatIsNotAnEntry(t *testing.T) {
	t.Parallel()
	db, s := changeAndReopen(t, func(log *bolt.Bucket) error {
		return log.Put([]byte{0}, []byte("stray")) // sorts before every position
	})
	st := s.Stats()
	require.Equal(t, 1, st.Unreadable)
	require.Equal(t, 2, st.Rebuilt)
	require.Equal(t, 2, st.Positions)
	require.Equal(t, value("j's"), get(t, db, s, "a", "j"))
	require.Equal(t, value("k's"), get(t, db, s, "a", "k"))
}

// Reopening rebuilds the directory from the log: every record is found,
// and the rebuild is counted.
func TestRebuildAtOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	s, err := Open(ctx, db, spec)
	require.NoError(t, err)
	for i := range 500 {
		put(t, db, s, fmt.Sprintf("s%d", i%7), fmt.Sprint(i), t0.Add(time.Duration(i%13)*time.Minute), value(fmt.Sprint(i)))
	}
	require.NoError(t, db.Close())

	db, err = kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	s2, err := Open(ctx, db, spec)
	require.NoError(t, err)
	st := s2.Stats()
	require.Equal(t, "log", st.Layout)
	require.Equal(t, 500, st.Rebuilt)
	require.Equal(t, 500, st.Positions)
	for i := range 500 {
		require.Equal(t, value(fmt.Sprint(i)), get(t, db, s2, fmt.Sprintf("s%d", i%7), fmt.Sprint(i)))
	}
	// Another Open in this process shares the store and its directory.
	s3, err := Open(ctx, db, spec)
	require.NoError(t, err)
	require.Same(t, s2.(*logStore), s3.(*logStore))
}

// The log keys sort by expiry: the records of one second share the tail,
// and Due walks them in expiry order.
func TestLogIsExpiryOrdered(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	for i, m := range []int{30, 10, 20, 10} {
		put(t, db, s, "a", fmt.Sprint(i), t0.Add(time.Duration(m)*time.Minute), value(fmt.Sprint(i)))
	}
	var keys []string
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		keys = nil
		s.Scan(tx, "", func(_ Ref, _, key string, _ []byte, ok bool) bool {
			require.True(t, ok)
			keys = append(keys, key)
			return true
		})
		return nil
	}))
	require.Equal(t, []string{"1", "3", "2", "0"}, keys)
}

// The keyed layout (format 1, and backends with several writers) is found,
// moved and deleted through the same interface. Delete removes the record
// and its expiry index entry (one left behind would make the sweep meet an
// index entry without a record).
func TestKeyedLayout(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "k.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	s := Keyed(spec)
	put(t, db, s, "a", "k", t0, value("v"))
	require.Equal(t, value("v"), get(t, db, s, "a", "k"))
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.True(t, keyspace.NewTimeIndex("test.expiry").Has(tx, t0, JoinKey("a", "k")))
		return nil
	}))

	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, v, err := s.Get(tx, "a", "k")
		require.NoError(t, err)
		require.NotNil(t, v)
		return s.Delete(tx, "a", "k", ref, t0)
	}))
	require.Nil(t, get(t, db, s, "a", "k"))
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.False(t, keyspace.NewTimeIndex("test.expiry").Has(tx, t0, JoinKey("a", "k")))
		return nil
	}))
}

// BenchmarkDirectoryHeap measures the directory's heap per record: a
// million entries in a directory of its own, added one by one as writes
// add them, or loaded as an open's rebuild loads them.
func BenchmarkDirectoryHeap(b *testing.B) {
	const n = 1_000_000
	for _, via := range []string{"add", "load"} {
		b.Run("via="+via, func(b *testing.B) {
			var perEntry float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				d := newDirectory(0)
				if via == "add" { // as writes add entries
					for i := range uint64(n) {
						d.add(d.hash("acme|POST /v1/orders", strconv.FormatUint(i, 16)), i<<ctrBits|i)
					}
				} else { // as an open's rebuild loads them
					found := new(gathered)
					for i := range uint64(n) {
						found.add(d.hash("acme|POST /v1/orders", strconv.FormatUint(i, 16)), i<<ctrBits|i)
					}
					d.load(found)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perEntry = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
				runtime.KeepAlive(d)
			}
			b.ReportMetric(perEntry, "heap-B/record")
		})
	}
}

// A value encoded after Frame's head and stored with PutFramed is stored
// as Put stores it (the same log entry, the keyed value alone) and read
// back the same, on both layouts; the log entry is closed in the buffer
// given, without a copy.
func TestPutFramedStoresWhatPutStores(t *testing.T) {
	t.Parallel()
	db, logS := open(t)
	v := value("framed")
	for _, s := range []Store{logS, Keyed(Spec{Name: "framed"})} {
		buf := make([]byte, 0, 256)
		var framed []byte
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			head := s.Frame(buf, "a", "f", len(v)+4)
			framed = append(head, v...)
			_, err := s.PutFramed(ctx, tx, "a", "f", Ref{}, time.Time{}, t0, framed)
			return err
		}))
		put(t, db, s, "a", "p", t0, v)
		require.Equal(t, v, get(t, db, s, "a", "f"), s.Layout())
		require.Equal(t, get(t, db, s, "a", "p"), get(t, db, s, "a", "f"), s.Layout())
		require.Same(t, &buf[:1][0], &framed[0], "%s: framed in the buffer given", s.Layout())
	}
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		ref, _, err := logS.Get(tx, "a", "f")
		require.NoError(t, err)
		entry := logS.both(tx).Get(posKey(ref.pos))
		require.Equal(t, wrap("a", "f", v), entry, "the entry Put would have written")
		return nil
	}))
}

// A probe that missed answers the write transaction's look-up without a
// second one only while nothing has been added under its key's hash
// since: a record of that key committed in between (the same key
// requested twice at once), or a probe of another key, is looked up and
// found.
func TestAMissIsLookedUpAgainOnlyWhenSomethingWasAdded(t *testing.T) {
	t.Parallel()
	kvtest.RequireOneRun(t, "takes back the count of one run's add")
	db, s := open(t)
	v := value("v")
	getProbed := func(key string, p Probe) []byte {
		var out []byte
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			_, got, err := s.GetProbed(tx, "a", key, p)
			out = bytes.Clone(got)
			return err
		}))
		return out
	}

	p, ok := s.Probe("a", "k")
	require.False(t, ok)
	put(t, db, s, "a", "k", t0, v) // committed between the probe and the look-up
	require.Equal(t, v, getProbed("k", p), "added since the probe: looked up again")

	other, ok := s.Probe("a", "other")
	require.False(t, ok)
	put(t, db, s, "a", "k2", t0, v)
	s.dir.adds[s.dir.hash("a", "k2")&(dirSlots-1)].Store(other.adds) // even were the counts alike
	require.Equal(t, v, getProbed("k2", other), "another key's probe is not this key's miss")

	// Nothing added under the hash since: the directory is not read
	// again. A position slipped into the map without counting (what no
	// add does) shows it: found only once the count moves.
	p, ok = s.Probe("a", "k3")
	require.False(t, ok)
	var pos uint64
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, err := s.Put(ctx, tx, "a", "k3", Ref{}, time.Time{}, t0, v)
		pos = ref.pos
		return err
	}))
	h := s.dir.hash("a", "k3")
	s.dir.adds[h&(dirSlots-1)].Add(^uint32(0)) // take back its count
	require.Nil(t, getProbed("k3", p), "an unchanged count: the miss stands")
	s.dir.adds[h&(dirSlots-1)].Add(1)
	require.Equal(t, v, getProbed("k3", p))
	require.NotZero(t, pos)
}

// callerPut writes (scope, key) in a bbolt transaction of the caller's own,
// as the Tx forms do (no Journal), committed unless rollback.
func callerPut(t *testing.T, db *kv.DB, s *logStore, scope, key string, rollback bool) {
	t.Helper()
	err := db.Bolt().Update(func(btx *bolt.Tx) error {
		_, err := s.Put(ctx, kv.WrapTx(btx), scope, key, Ref{}, time.Time{}, t0, value(key))
		require.NoError(t, err)
		if rollback {
			return errBoom
		}
		return nil
	})
	if rollback {
		require.ErrorIs(t, err, errBoom)
	} else {
		require.NoError(t, err)
	}
}

// The entries a caller's rolled-back transactions leave (oncekv never sees
// the rollback) go at the next write, whichever key it writes and whether
// it commits; a committed caller's entries stay. Before, each stayed until
// the next open, and counted as a record in the stats.
func TestRolledBackCallerEntriesGoAtTheNextWrite(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	for i := range 50 {
		callerPut(t, db, s, "a", "lost-"+strconv.Itoa(i), true)
	}
	require.Equal(t, 1, positions(s), "each write removed the entry the rollback before it left: the last one's waits")
	require.EqualValues(t, 1, s.hints.n.Load())
	callerPut(t, db, s, "a", "kept", false)
	require.Equal(t, 1, positions(s), "the last rollback's entry gone, the committed one's kept")

	// A later write that rolls back settles them too: what it saw of
	// earlier transactions does not depend on its own outcome.
	err := db.Update(ctx, func(tx kv.Tx) error {
		_, err := s.Put(ctx, tx, "b", "x", Ref{}, time.Time{}, t0, value("x"))
		require.NoError(t, err)
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.Equal(t, 2, positions(s), "the committed caller's entry, and the rolled-back write's own (the next write's to settle)")
	require.EqualValues(t, 1, s.hints.n.Load(), "the committed caller's entry is settled: a live record's")

	put(t, db, s, "b", "y", t0, value("y"))
	require.Equal(t, 2, positions(s), "kept and y: every stale entry gone")

	// One caller's transaction writing many records settles once, and
	// keeps its own entries whatever it wrote before.
	callerPut(t, db, s, "c", "lost", true)
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		for i := range 20 {
			_, err := s.Put(ctx, kv.WrapTx(btx), "c", "many-"+strconv.Itoa(i), Ref{}, time.Time{}, t0, value("m"))
			require.NoError(t, err)
		}
		return nil
	}))
	require.Equal(t, 22, positions(s))
	put(t, db, s, "b", "z", t0, value("z"))
	require.Equal(t, 23, positions(s))
	for i := range 20 {
		require.Equal(t, value("m"), get(t, db, s, "c", "many-"+strconv.Itoa(i)))
	}
	require.Nil(t, get(t, db, s, "c", "lost"))
	require.Equal(t, value("kept"), get(t, db, s, "a", "kept"))
	require.Equal(t, value("y"), get(t, db, s, "b", "y"))
	require.Nil(t, get(t, db, s, "b", "x"))
	for i := range 50 {
		require.Nil(t, get(t, db, s, "a", "lost-"+strconv.Itoa(i)))
	}
}

// A write that deletes a committed caller's record and then settles does
// not judge that record's entry by its own view: if it rolls back, the
// record is still there, and so must its entry be (the directory is
// authoritative for misses: without it, a retry would run again).
func TestSettlingKeepsEntriesItsOwnTransactionDeleted(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	callerPut(t, db, s, "a", "x", false) // its entry waits to be settled
	// Its commit's mark not seen yet (it comes after bbolt releases the
	// writer lock): the next write judges the entry by what it sees.
	s.hints.groups[0].committed.Store(false)
	err := db.Update(ctx, func(tx kv.Tx) error {
		ref, v, err := s.Get(tx, "a", "x")
		require.NoError(t, err)
		require.NotNil(t, v)
		require.NoError(t, s.Delete(tx, "a", "x", ref, t0))
		_, err = s.Put(ctx, tx, "b", "y", Ref{}, time.Time{}, t0, value("y")) // settles
		require.NoError(t, err)
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.Equal(t, value("x"), get(t, db, s, "a", "x"), "the record the rolled-back delete left is found")

	// Deleted for good: the next write settles it, and the delete's own
	// commit removed the entry anyway.
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, _, err := s.Get(tx, "a", "x")
		require.NoError(t, err)
		return s.Delete(tx, "a", "x", ref, t0)
	}))
	put(t, db, s, "b", "z", t0, value("z"))
	require.Nil(t, get(t, db, s, "a", "x"))
	require.Equal(t, 1, positions(s), "z alone")
}

// The entries kept to settle are bounded: past maxHints, a rolled-back
// caller's entry stays until the next open, as before.
func TestHintsAreBounded(t *testing.T) {
	t.Parallel()
	kvtest.RequireOneRun(t, "pins the hints of one run")
	db, _ := open(t)
	var hs hints
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for i := range maxHints + 10 {
			hs.add(tx, uint64(i), uint64(i))
		}
		hs.add(struct{ kv.Tx }{tx}, 1, 1) // a transaction bbolt does not back is not told apart: not kept
		return nil
	}))
	require.Len(t, hs.groups, 1)
	require.Len(t, hs.groups[0].entries, maxHints)
	require.EqualValues(t, maxHints, hs.n.Load())
	require.True(t, hs.groups[0].committed.Load(), "the commit marked its entries")
}

// A commit's mark comes after bbolt releases the writer lock, so the next
// write may settle before it: the entries of a committed transaction not
// yet marked are kept, by their records.
func TestSettlingBeforeTheCommitsMark(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	callerPut(t, db, s, "a", "x", false)
	require.Len(t, s.hints.groups, 1)
	s.hints.groups[0].committed.Store(false) // as if its OnCommit had not run yet
	callerPut(t, db, s, "a", "lost", true)
	require.Equal(t, value("x"), get(t, db, s, "a", "x"))
	require.Equal(t, 2, positions(s), "x, and the rolled-back write's entry, for the next write")
	put(t, db, s, "b", "y", t0, value("y"))
	require.Equal(t, value("x"), get(t, db, s, "a", "x"))
	require.Nil(t, get(t, db, s, "a", "lost"))
	require.Equal(t, 2, positions(s), "x and y")
}

// A caller's transaction that writes several records, the first when
// nothing waited to be settled, then rolls back: the next write removes
// every entry, and what is kept to settle is that write's own, alone.
func TestRolledBackImportGoesAtTheNextWrite(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	err := db.Bolt().Update(func(btx *bolt.Tx) error {
		for _, k := range []string{"k1", "k2", "k3"} {
			_, err := s.Put(ctx, kv.WrapTx(btx), "a", k, Ref{}, time.Time{}, t0, value(k))
			require.NoError(t, err)
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.Equal(t, 3, positions(s))
	require.EqualValues(t, 3, s.hints.n.Load())
	require.Len(t, s.hints.groups, 1)

	err = db.Update(ctx, func(tx kv.Tx) error { // rolled back too, after settling
		_, err := s.Put(ctx, tx, "b", "x", Ref{}, time.Time{}, t0, value("x"))
		require.NoError(t, err)
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.Equal(t, 1, positions(s), "the import's entries gone; the last write's own left")
	require.EqualValues(t, 1, s.hints.n.Load())
	require.Len(t, s.hints.groups, 1, "no group left empty")

	put(t, db, s, "b", "y", t0, value("y"))
	require.Equal(t, 1, positions(s))
	require.EqualValues(t, 1, s.hints.n.Load())
	require.Len(t, s.hints.groups, 1)
	for _, k := range []string{"k1", "k2", "k3", "x"} {
		require.Nil(t, get(t, db, s, "a", k))
	}
	require.Equal(t, value("y"), get(t, db, s, "b", "y"))
}

// A key in the log that is not a position (a damaged page's, or one written
// by hand) is listed once as what it is, and the listing goes on past it;
// an entry whose framing is cut short is listed as damaged under the scope
// and key it still reads as, so that an operator can tell whose it was.
func TestListGoesOnPastWhatIsNotAnEntry(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "k1", t0, value("v"))
	put(t, db, s, "a", "k2", t0, value("v"))
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		require.NoError(t, FlushTail(kv.WrapTx(btx), spec))
		b := btx.Bucket(LogBucket(spec))
		require.NoError(t, b.Put([]byte{0}, []byte("stray"))) // sorts before every position
		return b.Put(posKey(expirySec(t0)<<ctrBits|ctrMask), wrap("a", "cut", value("v"))[:3+2+4])
	}))
	type listed struct {
		scope, key string
		ok         bool
	}
	var got []listed
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		got = nil // a rerun build runs this twice
		s.List(tx, "", func(_ Ref, scope, key string, _ []byte, ok bool) bool {
			got = append(got, listed{scope, key, ok})
			return true
		})
		return nil
	}))
	require.Equal(t, []listed{{"", "", false}, {"a", "k1", true}, {"a", "k2", true}, {"a", "cut", false}}, got)
}
