package recstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
)

// contents returns the positions the log and the tail hold, in order.
func contents(t *testing.T, db *kv.DB) (log, tail []uint64, tailBytes int) {
	t.Helper()
	require.NoError(t, db.Bolt().View(func(btx *bolt.Tx) error {
		if b := btx.Bucket(LogBucket(spec)); b != nil {
			require.NoError(t, b.ForEach(func(k, _ []byte) error { log = append(log, binary.BigEndian.Uint64(k)); return nil }))
		}
		if b := btx.Bucket(TailBucket(spec)); b != nil {
			require.NoError(t, b.ForEach(func(k, v []byte) error {
				if len(k) != 8 {
					return nil // not a position: the tests that make one look
				}
				tail = append(tail, binary.BigEndian.Uint64(k))
				tailBytes += 16 + len(k) + len(v) // bbolt's leaf element, key and value
				return nil
			}))
		}
		return nil
	}))
	return log, tail, tailBytes
}

// New entries go to the tail, which never outgrows one leaf page: when the
// next one would not fit, the tail's entries move to the log in that
// transaction, at their positions. Every record stays where the directory
// says, through every move, and each position is in one bucket.
func TestTailMovesToTheLogAPageAtATime(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	tailMovesAPageAtATime(t, db, s, 100)
}

// The same on a file of 16 KiB pages (bbolt's default where the operating
// system's page is 16 KiB, as on Apple silicon, and what a caller's own
// bolt.Options.PageSize may ask for): the tail's room and the moves follow
// the file's page size, and a reopened file finds every record.
func TestTailFollowsThePageSize(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "16k.db")
	openWrapped := func() (*bolt.DB, *kv.DB, *logStore) {
		bdb, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: 16 << 10, NoSync: true})
		require.NoError(t, err)
		db, err := kv.Wrap(bdb, nil)
		require.NoError(t, err)
		st, err := Open(ctx, db, spec)
		require.NoError(t, err)
		return bdb, db, st.(*logStore)
	}
	bdb, db, s := openWrapped()
	require.Equal(t, 16<<10, bdb.Info().PageSize)
	const n = 300
	tailMovesAPageAtATime(t, db, s, n)
	require.NoError(t, db.Close())
	require.NoError(t, bdb.Close())

	bdb, db, s = openWrapped()
	defer func() { _ = bdb.Close() }()
	defer func() { _ = db.Close() }()
	require.Equal(t, n, positions(s), "the rebuild reads the log and its tail")
	requireFound(t, db, s, n, value(strings.Repeat("v", 200)))
}

// tailMovesAPageAtATime writes n records one transaction each, and checks
// after every commit that the tail fits in one leaf page of db, that each
// position is in exactly one bucket, and that the tail moved a page of
// entries at a time: as many moves as pages the entries filled.
func tailMovesAPageAtATime(t *testing.T, db *kv.DB, s *logStore, n int) {
	t.Helper()
	pageSize := db.Bolt().Info().PageSize
	v := value(strings.Repeat("v", 200))
	moves, prevTail := 0, 0
	for i := range n {
		put(t, db, s, "a", fmt.Sprint("k", i), t0, v)
		log, tail, tailBytes := contents(t, db)
		require.LessOrEqual(t, tailBytes, pageSize-leafHeader, "the tail fits in one leaf page")
		require.Len(t, log, i+1-len(tail), "every entry is in one of the two")
		require.Empty(t, intersect(log, tail))
		if len(tail) < prevTail {
			moves++
			require.Len(t, tail, 1, "a move empties the tail before the new entry goes in")
		}
		prevTail = len(tail)
	}
	// bbolt's leaf element, the position's 8 bytes and the entry (its key
	// is 2 to 4 digits long: the estimate is within one move).
	perPage := (pageSize - leafHeader) / (16 + 8 + len(wrap("a", "k100", v)))
	require.InDelta(t, (n-1)/perPage, moves, 1, "a page of entries at a time (%d a page)", perPage)
	requireFound(t, db, s, n, v)
	require.Equal(t, n, positions(s))
	problems, err := db.Check(ctx, testKind())
	require.NoError(t, err)
	require.Empty(t, problems)
}

func intersect(a, b []uint64) []uint64 {
	var out []uint64
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// An entry of half a page or more goes straight to the log: it would
// only push the others out of the tail.
func TestLargeEntriesGoStraightToTheLog(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "small", t0, value("v"))
	big := value(strings.Repeat("b", db.Bolt().Info().PageSize/2))
	put(t, db, s, "a", "big", t0, big)
	log, tail, _ := contents(t, db)
	require.Len(t, log, 1)
	require.Len(t, tail, 1, "the small entry stays in the tail")
	require.Equal(t, big, get(t, db, s, "a", "big"))
	require.Equal(t, value("v"), get(t, db, s, "a", "small"))
}

// A record replaced at the same expiry is overwritten where it is, in
// the tail or in the log; replaced at another expiry it moves, and its
// old position goes from whichever bucket held it.
func TestReplacingAnEntryInTheTailOrTheLog(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "k", t0, value("v1"))
	put(t, db, s, "a", "k", t0, value("v2"))
	log, tail, _ := contents(t, db)
	require.Empty(t, log)
	require.Len(t, tail, 1)
	require.Equal(t, value("v2"), get(t, db, s, "a", "k"))

	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error { return FlushTail(tx, spec) }))
	put(t, db, s, "a", "k", t0, value("v3"))
	log, tail, _ = contents(t, db)
	require.Len(t, log, 1, "overwritten in the log")
	require.Empty(t, tail)
	require.Equal(t, value("v3"), get(t, db, s, "a", "k"))

	put(t, db, s, "a", "k", t0.Add(time.Hour), value("v4"))
	log, tail, _ = contents(t, db)
	require.Empty(t, log, "the old position left the log")
	require.Len(t, tail, 1)
	require.Equal(t, value("v4"), get(t, db, s, "a", "k"))
	require.Equal(t, 1, positions(s))
}

// A transaction that moved the tail and rolled back leaves the log, the
// tail and the directory's answers as they were, and the next transaction
// moves the tail.
func TestRolledBackMoveLeavesNoTrace(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	v := value(strings.Repeat("v", 300))
	i := 0
	for {
		put(t, db, s, "a", fmt.Sprint("k", i), t0, v)
		i++
		if _, _, used := contents(t, db); used+16+8+len(wrap("a", fmt.Sprint("k", i), v)) > db.Bolt().Info().PageSize-16 {
			break // the next entry moves the tail
		}
	}
	log0, tail0, _ := contents(t, db)
	require.Empty(t, log0)
	err := db.Update(ctx, func(tx kv.Tx) error {
		if _, err := s.Put(ctx, tx, "a", "rolled-back", Ref{}, time.Time{}, t0, v); err != nil {
			return err
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	log, tail, _ := contents(t, db)
	require.Equal(t, log0, log)
	require.Equal(t, tail0, tail)
	require.Nil(t, get(t, db, s, "a", "rolled-back"))
	requireFound(t, db, s, i, v)

	// The next transaction (bbolt gives it the rolled-back one's ID) moves
	// the full tail and starts a new one: it wrote its entry to the log
	// beside the full tail, and so did the next run of a rolled-back
	// batch (every transaction in a build with -tags oncekv_rerun).
	put(t, db, s, "a", "after", t0, v)
	log, tail, _ = contents(t, db)
	require.Equal(t, tail0, log, "the tail moved")
	require.Len(t, tail, 1, "the new entry starts the next tail")
}

// The check reports a position held by the log and the tail at once.
func TestCheckReportsAPositionInBoth(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "k", t0, value("v"))
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		k, v := btx.Bucket(TailBucket(spec)).Cursor().First()
		log, err := btx.CreateBucketIfNotExists(LogBucket(spec))
		require.NoError(t, err)
		return log.Put(bytes.Clone(k), bytes.Clone(v))
	}))
	problems, err := db.Check(ctx, testKind())
	require.NoError(t, err)
	require.Len(t, problems, 2, "%q", problems) // in both; two entries of one record
	require.Contains(t, problems[0].Message, "in the log and in its tail")
	require.Contains(t, problems[1].Message, "two log entries")
}

// The union cursor walks the log and the tail as one ordered bucket, both
// ways, from any Seek, changing direction anywhere.
func TestUnionCursorWalksBothInOrder(t *testing.T) {
	t.Parallel()
	db, _ := open(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		var all []string
		require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
			for _, name := range []string{"a", "b"} {
				if btx.Bucket([]byte(name)) != nil {
					require.NoError(t, btx.DeleteBucket([]byte(name)))
				}
			}
			a, _ := btx.CreateBucket([]byte("a"))
			b, _ := btx.CreateBucket([]byte("b"))
			for range rng.IntN(40) {
				k := fmt.Sprintf("%04d", rng.IntN(1000))
				if slices.Contains(all, k) {
					continue
				}
				all = append(all, k)
				dst := a
				if rng.IntN(2) == 0 && round%5 != 0 { // every fifth round: the tail empty
					dst = b
				}
				require.NoError(t, dst.Put([]byte(k), []byte("v"+k)))
			}
			return nil
		}))
		slices.Sort(all)
		require.NoError(t, db.Bolt().View(func(btx *bolt.Tx) error {
			tx := kv.WrapTx(btx)
			c := (&unionBucket{log: tx.Bucket([]byte("a")), tail: tx.Bucket([]byte("b"))}).Cursor()
			var fwd, back []string
			for k, v := c.First(); k != nil; k, v = c.Next() {
				require.Equal(t, "v"+string(k), string(v))
				fwd = append(fwd, string(k))
			}
			for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
				back = append(back, string(k))
			}
			require.Equal(t, all, nilIfEmpty(fwd))
			slices.Reverse(back)
			require.Equal(t, all, nilIfEmpty(back))
			// A random walk: Seek, then steps either way, against the
			// sorted list.
			for range 50 {
				seek := fmt.Sprintf("%04d", rng.IntN(1001))
				i, _ := slices.BinarySearch(all, seek)
				k, _ := c.Seek([]byte(seek))
				require.Equal(t, at(all, i), string(k), "Seek(%s)", seek)
				for range 10 {
					if i < 0 || i >= len(all) {
						break // off either end: the cursor is done
					}
					if rng.IntN(2) == 0 {
						k, _ = c.Next()
						i++
					} else {
						k, _ = c.Prev()
						i--
					}
					require.Equal(t, at(all, i), string(k))
				}
			}
			return nil
		}))
	}
}

func at(all []string, i int) string {
	if i < 0 || i >= len(all) {
		return ""
	}
	return all[i]
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// testKind is a kind over spec whose records all expire at t0.
func testKind() *Kind[string] {
	return &Kind[string]{
		Spec:      spec,
		KindName:  "test",
		Decode:    func(_, _ string, _ []byte, _ bool) (string, error) { return "", nil },
		ExpiresAt: func(string) time.Time { return t0 },
	}
}

// A transaction that moved the tail writes its later entries to the log,
// whose tail path its commit writes anyway: a group commit moves the tail
// once, not once a page of entries. The next transaction uses the tail
// again.
func TestAGroupCommitMovesTheTailOnce(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	v := value(strings.Repeat("v", 200))
	const n = 60
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for i := range n {
			if _, err := s.Put(ctx, tx, "a", fmt.Sprint("k", i), Ref{}, time.Time{}, t0, v); err != nil {
				return err
			}
		}
		return nil
	}))
	log, tail, _ := contents(t, db)
	require.Len(t, tail, 1, "the entry that made the move")
	require.Len(t, log, n-1)
	put(t, db, s, "a", "next", t0, v)
	log2, tail2, _ := contents(t, db)
	require.Len(t, tail2, 2)
	require.Equal(t, log, log2)
	requireFound(t, db, s, n, v)
}

// A nested bucket in the tail (raw bbolt writing in oncekv's namespace) is
// a clear error when the tail would move, and nothing is written.
func TestANestedBucketInTheTailIsAnError(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "k", t0, value("v"))
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		_, err := btx.Bucket(TailBucket(spec)).CreateBucket([]byte("nested"))
		return err
	}))
	v := value(strings.Repeat("v", 300))
	var err error
	for i := 0; err == nil && i < 100; i++ {
		err = db.Update(ctx, func(tx kv.Tx) error {
			_, err := s.Put(ctx, tx, "a", fmt.Sprint("k", i), Ref{}, time.Time{}, t0, v)
			return err
		})
	}
	require.ErrorContains(t, err, "test tail holds a nested bucket at key 6e6573746564")
	log, _, _ := contents(t, db)
	require.Empty(t, log, "no move was committed")
	require.Equal(t, value("v"), get(t, db, s, "a", "k"))
}

// The tail holds exactly one leaf page of entries (bbolt's page header
// aside): entries that fill it to the byte stay; one byte more moves them.
// An entry of exactly half that goes to the log; one byte less, the tail.
func TestTailBoundaries(t *testing.T) {
	t.Parallel()
	appendRaw := func(t *testing.T, db *kv.DB, s *logStore, pos uint64, n int) {
		t.Helper()
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			log, err := packedLog(tx, s.log)
			require.NoError(t, err)
			return s.appendEntry(tx, log, pos, bytes.Repeat([]byte{'e'}, n))
		}))
	}
	// A leaf page's room, from bbolt's page size and its 16-byte page
	// header, and an entry (16-byte element, 8-byte position) that costs a
	// quarter of it.
	room := func(db *kv.DB) int { return db.Bolt().Info().PageSize - 16 }
	quarter := func(db *kv.DB) int { return room(db)/4 - 16 - 8 }
	for _, tc := range []struct {
		name       string
		last       int // the fourth entry's length, beside three quarters
		moved      bool
		tail, logN int
	}{
		{"fills the page to the byte", 0, false, 4, 0},
		{"one byte over", 1, true, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, s := open(t)
			require.Zero(t, room(db)%4, "the test needs a page that divides by four")
			for i := range 3 {
				appendRaw(t, db, s, uint64(i+1), quarter(db))
			}
			appendRaw(t, db, s, 4, quarter(db)+tc.last)
			log, tail, used := contents(t, db)
			require.Len(t, tail, tc.tail)
			require.Len(t, log, tc.logN)
			require.LessOrEqual(t, used, room(db))
		})
	}
	t.Run("half a page goes to the log", func(t *testing.T) {
		t.Parallel()
		db, s := open(t)
		half := room(db)/2 - 16 - 8
		appendRaw(t, db, s, 1, half-1)
		appendRaw(t, db, s, 2, half)
		log, tail, _ := contents(t, db)
		require.Equal(t, []uint64{2}, log)
		require.Equal(t, []uint64{1}, tail)
	})
}

// requireFound requires the records "a"/"k0".."k<n-1>" to hold v.
func requireFound(t *testing.T, db *kv.DB, s *logStore, n int, v []byte) {
	t.Helper()
	for i := range n {
		require.Equal(t, v, get(t, db, s, "a", fmt.Sprint("k", i)), "k%d", i)
	}
}

// Once the counter has wrapped, a new position is looked up before it is
// used, in the tail as in the log: a record in either is never
// overwritten by a new one at the same position.
func TestAWrappedCounterSkipsPositionsInTheTail(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "in-log", t0, value("log"))
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error { return FlushTail(tx, spec) }))
	put(t, db, s, "a", "in-tail", t0, value("tail"))
	log, tail, _ := contents(t, db)
	require.Len(t, log, 1)
	require.Len(t, tail, 1)
	s.ctr.Store(0) // the next counters are the two positions taken
	s.wrapped.Store(true)
	put(t, db, s, "a", "new", t0, value("new"))
	for k, v := range map[string]string{"in-log": "log", "in-tail": "tail", "new": "new"} {
		require.Equal(t, value(v), get(t, db, s, "a", k), k)
	}
	require.Equal(t, 3, positions(s))
}

// A transaction that appends entry after entry fills the tail as far as
// separate transactions do, then moves it once: the tail's size is
// carried from one append to the next within the transaction (not walked
// again), and counts every entry it added.
func TestOneTransactionFillsTheTailExactly(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	v := value(strings.Repeat("v", 200))
	cost := inLeaf(posKey(1), wrap("a", "k10", v))
	fit := s.budget / cost // entries of this size the tail holds
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for i := range fit {
			if _, err := s.Put(ctx, tx, "a", fmt.Sprint("k", i+10), Ref{}, time.Time{}, t0, v); err != nil {
				return err
			}
		}
		return nil
	}))
	log, tail, _ := contents(t, db)
	require.Empty(t, log)
	require.Len(t, tail, fit, "the tail holds as many as fit")

	db2, s2 := open(t)
	require.NoError(t, db2.Update(ctx, func(tx kv.Tx) error {
		for i := range fit + 1 {
			if _, err := s2.Put(ctx, tx, "a", fmt.Sprint("k", i+10), Ref{}, time.Time{}, t0, v); err != nil {
				return err
			}
		}
		return nil
	}))
	log, tail, _ = contents(t, db2)
	require.Len(t, log, fit, "the entry that does not fit moves the full tail")
	require.Len(t, tail, 1)
	for i := range fit + 1 {
		require.Equal(t, v, get(t, db2, s2, "a", fmt.Sprint("k", i+10)))
	}
}
