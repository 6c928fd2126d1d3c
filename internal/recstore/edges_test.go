package recstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
)

// entryOf builds a log entry around body with a valid checksum.
func entryOf(body []byte) []byte {
	v := append([]byte{record.Magic, byte(record.KindLogEntry), entryLayout}, body...)
	return binary.LittleEndian.AppendUint32(v, crc32.Checksum(v, castagnoli))
}

// unwrap at its edges: the smallest entry (empty scope, key and value),
// lengths that fill the entry exactly, one byte more than there is (never
// a read past the end), a body too short for a length; intact on the
// smallest input it accepts.
func TestEntryEdges(t *testing.T) {
	sc, k, v, ok := unwrap(wrap("", "", nil))
	require.True(t, ok)
	require.Empty(t, sc)
	require.Empty(t, k)
	require.Empty(t, v)
	require.Len(t, wrap("", "", nil), 3+2+4)

	sc, k, v, ok = unwrap(entryOf([]byte{2, 'a', 'b', 1, 'c'}))
	require.True(t, ok, "scope and key fill the body exactly")
	require.Equal(t, "ab", string(sc))
	require.Equal(t, "c", string(k))
	require.Empty(t, v)

	for name, body := range map[string][]byte{
		"no body":            {},
		"scope one too long": {3, 'a', 'b'},
		"no key length":      {1, 'a'},
		"key one too long":   {1, 'a', 2, 'b'},
		"bad scope varint":   {0x80},
		"bad key varint":     {0, 0x80},
	} {
		_, _, _, ok := unwrap(entryOf(body))
		require.False(t, ok, name)
	}
	_, _, _, ok = unwrap([]byte{record.Magic, byte(record.KindLogEntry), entryLayout, 0, 0, 0})
	require.False(t, ok, "shorter than a header and a checksum")

	// An entry of another kind or layout, checksum and all, is not read as
	// this one (a later format's entry met by this code).
	for i, b := range []byte{record.Magic ^ 1, byte(record.KindLogEntry) + 1, entryLayout + 1} {
		v := []byte{record.Magic, byte(record.KindLogEntry), entryLayout, 1, 'a', 1, 'b'}
		v[i] = b
		v = binary.LittleEndian.AppendUint32(v, crc32.Checksum(v, castagnoli))
		_, _, _, ok = unwrap(v)
		require.False(t, ok, "header byte %d changed", i)
		_, _, ok = identity(v)
		require.False(t, ok, "header byte %d changed", i)
		require.Equal(t, "unreadable framing", why(v))
	}
	// identity reads what is left of an entry cut short: never past it.
	for n := range 3 {
		_, _, ok = identity(wrap("a", "b", nil)[:n])
		require.False(t, ok, "%d bytes", n)
	}
	sc, k, ok = identity(wrap("a", "b", value("v"))[:7])
	require.True(t, ok, "scope and key, the rest cut off")
	require.Equal(t, "a", string(sc))
	require.Equal(t, "b", string(k))

	require.True(t, intact([]byte{0, 0, 0, 0}), "the checksum of nothing is 0")
	require.False(t, intact([]byte{0, 0, 0}))
}

// The directory keeps several positions under one hash (a collision, a
// record moving) and forgets them one by one.
func TestDirectorySeveralPositionsPerHash(t *testing.T) {
	d := newDirectory(0)
	d.add(7, 1)
	d.add(7, 2)
	d.add(7, 3)
	d.add(7, 2) // already there
	n, extra := d.len()
	require.Equal(t, 3, n)
	require.Equal(t, 2, extra)
	positions := func() []uint64 { return d.candidates(7, nil) }
	require.Equal(t, []uint64{1, 2, 3}, positions())
	d.remove(7, 2)
	require.Equal(t, []uint64{1, 3}, positions())
	d.remove(7, 1)
	require.Equal(t, []uint64{3}, positions())
	n, extra = d.len()
	require.Equal(t, 1, n)
	require.Zero(t, extra)
	d.remove(7, 9) // not there: nothing changes
	d.remove(7, 3)
	require.Empty(t, positions())
	n, _ = d.len()
	require.Zero(t, n)
}

// An open's rebuild loads the directory in bulk, shards in parallel: the
// directory it leaves is the one adding each position in log order would,
// collisions, repeats and positions already there included.
func TestDirectoryLoadIsAddInBulk(t *testing.T) {
	added, loaded := newDirectory(0), newDirectory(0)
	added.add(5<<58|9, 1) // already there before the load (a migration's)
	loaded.add(5<<58|9, 1)
	found := new(gathered)
	x := uint64(1)
	for pos := uint64(2); pos < 5000; pos++ {
		x = x*6364136223846793005 + 1442695040888963407
		h := x&(7<<58) | x%13 // eight shards, thirteen hashes in each: many collisions
		if pos%97 == 0 {
			h = 5<<58 | 9 // beside the position added before
		}
		for range 1 + pos%3/2 { // every third position twice
			added.add(h, pos)
			found.add(h, pos)
		}
	}
	loaded.load(found)
	for i := range dirShards {
		require.Equal(t, added.shards[i].one, loaded.shards[i].one, "shard %d", i)
		require.Equal(t, added.shards[i].more, loaded.shards[i].more, "shard %d", i)
	}
	n, extra := loaded.len()
	require.Equal(t, 4999, n)
	require.Positive(t, extra)
}

// A log of more positions than a rebuild gathers at once loads in several
// chunks, and the directory is the one a single load leaves, whatever
// chunk the positions fall in (a record in the tail too).
func TestRebuildInChunks(t *testing.T) {
	db, s := open(t)
	for i := range 50 {
		put(t, db, s, "s", fmt.Sprint("k", i), t0.Add(time.Duration(i%3)*time.Hour), value(fmt.Sprint("v", i)))
	}
	rebuild := func(chunk int) *directory {
		defer func(was int) { rebuildChunk = was }(rebuildChunk)
		rebuildChunk = chunk
		d := newDirectory(0)
		d.seed = s.dir.seed // the same hashes as the open store's
		rs, err := openLog(ctx, db, spec, d)
		require.NoError(t, err)
		require.Equal(t, 50, rs.Stats().Rebuilt)
		return d
	}
	whole := rebuild(1 << 22)
	for _, chunk := range []int{1, 7, 50} {
		d := rebuild(chunk)
		for i := range dirShards {
			require.Equal(t, whole.shards[i].one, d.shards[i].one, "chunk %d, shard %d", chunk, i)
			require.Equal(t, whole.shards[i].more, d.shards[i].more, "chunk %d, shard %d", chunk, i)
		}
	}
	for i := range dirShards {
		require.Equal(t, s.dir.shards[i].one, whole.shards[i].one, "the rebuild differs from the directory the writes left")
	}
}

// Hashes that differ only in the bits that choose a shard live in
// different shards, and each keeps its own positions; len counts them all.
func TestDirectoryShards(t *testing.T) {
	d := newDirectory(0)
	hashes := []uint64{7, 1<<58 | 7, 63<<58 | 7, 0xFFFF_FFFF_FFFF_FFFF}
	for i, h := range hashes {
		d.add(h, uint64(i+1))
	}
	require.NotSame(t, d.shard(hashes[0]), d.shard(hashes[1]))
	require.NotSame(t, d.shard(hashes[1]), d.shard(hashes[2]))
	for i, h := range hashes {
		require.Equal(t, []uint64{uint64(i + 1)}, d.candidates(h, nil))
		p, extra, ok, _ := d.first(h)
		require.True(t, ok)
		require.False(t, extra)
		require.Equal(t, uint64(i+1), p)
	}
	d.add(hashes[1], 9)
	_, extra, _, _ := d.first(hashes[1])
	require.True(t, extra, "a second position under one hash is not reported")
	d.remove(hashes[1], 9)
	n, more := d.len()
	require.Equal(t, len(hashes), n)
	require.Zero(t, more)
	d.remove(hashes[2], 3)
	require.Empty(t, d.candidates(hashes[2], nil))
	require.Equal(t, []uint64{4}, d.candidates(hashes[3], nil), "a neighbour's entry is untouched")
	n, _ = d.len()
	require.Equal(t, len(hashes)-1, n)
}

// After a reopen, new records of the same expiry second get positions past
// every stored one (the rebuild restores the counter): nothing written
// before is overwritten, and every record of both rounds is found.
func TestPositionsAfterReopenNeverCollide(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	exp := t0.Add(time.Hour)
	for round := range 2 {
		db, err := kv.Open(path, &kv.Options{NoSync: true})
		require.NoError(t, err)
		s, err := Open(ctx, db, spec)
		require.NoError(t, err)
		for i := range 50 {
			key := fmt.Sprintf("r%d-%d", round, i)
			put(t, db, s, "s", key, exp, value(key))
		}
		require.Equal(t, 50*(round+1), s.Stats().Positions)
		for r := 0; r <= round; r++ {
			for i := range 50 {
				key := fmt.Sprintf("r%d-%d", r, i)
				require.Equal(t, value(key), get(t, db, s, "s", key), key)
			}
		}
		require.False(t, s.(*logStore).wrapped.Load(), "the counter is far from wrapping")
		require.NoError(t, db.Close())
	}
}

// The log is appended at its tail, so its leaves are packed full (bbolt
// splits at 100% instead of 50%): a batch writes half as many leaf pages.
func TestLogLeavesArePackedFull(t *testing.T) {
	db, s := open(t)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for i := range 3000 {
			if _, err := s.Put(ctx, tx, "s", fmt.Sprint(i), Ref{}, time.Time{}, t0.Add(time.Hour), value(fmt.Sprint(i))); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		st := kv.BoltTx(tx).Bucket(s.log.Bytes()).Stats()
		fill := float64(st.LeafInuse) / float64(st.LeafPageN*db.Bolt().Info().PageSize)
		require.Greater(t, fill, 0.8, "%d leaf pages, %.2f full", st.LeafPageN, fill)
		return nil
	}))
}

// Due, on the log layout: the records of every second up to now's own
// second, in expiry order, limit at a time, each page resuming after the
// last one's cursor without repeating it; a record of the next second is
// not due.
func TestDuePagesThroughTheLog(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	for i, at := range []time.Duration{0, 0, 0, time.Second + 500*time.Millisecond, 2 * time.Second} {
		put(t, db, s, "a", fmt.Sprint(i), t0.Add(at), value(fmt.Sprint(i)))
	}
	k := testKind()
	now := t0.Add(time.Second) // the record of t0+1.5s is of this second
	var pages [][]kv.Due
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		pages = nil
		var after []byte
		for {
			page := k.Due(tx, now, after, 2)
			if len(page) == 0 {
				return nil
			}
			pages = append(pages, page)
			after = page[len(page)-1].Cursor
		}
	}))
	require.Len(t, pages, 2, "four records due, two a page")
	var keys []string
	var secs []int64
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		keys, secs = nil, nil
		for _, page := range pages {
			require.LessOrEqual(t, len(page), 2)
			for _, d := range page {
				b := k.both(tx)
				scope, key, _, ok := unwrap(b.Get(d.Key))
				require.True(t, ok)
				require.Equal(t, "a", string(scope))
				keys = append(keys, string(key))
				secs = append(secs, d.At.Unix())
			}
		}
		return nil
	}))
	require.ElementsMatch(t, []string{"0", "1", "2", "3"}, keys, "each due record once, the one of the next second not at all")
	require.Equal(t, []int64{t0.Unix(), t0.Unix(), t0.Unix(), t0.Unix() + 1}, secs, "in expiry order")
}

// The check compares the log with the directory of the store open in
// this process: an entry written behind its back (raw bbolt) is one the
// directory cannot find, and is reported; the entries it wrote are not.
func TestCheckReportsAnEntryTheDirectoryMisses(t *testing.T) {
	t.Parallel()
	db, s := open(t)
	put(t, db, s, "a", "known", t0, value("v"))
	problems, err := db.Check(ctx, testKind())
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		log, err := btx.CreateBucketIfNotExists(LogBucket(spec))
		require.NoError(t, err)
		return log.Put(posKey(expirySec(t0)<<ctrBits|ctrMask), wrap("a", "unknown", value("w")))
	}))
	problems, err = db.Check(ctx, testKind())
	require.NoError(t, err)
	require.Len(t, problems, 1, "%q", problems)
	require.Contains(t, problems[0].Message, `"a"/"unknown": the in-memory directory does not find log entry`)
}

// panickingCtx panics when asked whether it has ended: a stand-in for a
// panic while a store is built (bbolt on a damaged page, a bug).
type panickingCtx struct{ context.Context }

func (panickingCtx) Err() error { panic("building the store") }

// A panic while a kind's store is built reaches the caller, and leaves no
// half-built store behind: the next Open fails with an error or builds the
// store again, and never returns a nil store (whose first call would
// panic far from the cause).
func TestOpenAfterAPanicWhileBuilding(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "r.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	func() {
		defer func() { require.Equal(t, "building the store", recover()) }()
		_, _ = Open(panickingCtx{ctx}, db, spec)
	}()
	s, err := Open(ctx, db, spec)
	if err == nil {
		require.NotNil(t, s.(*logStore), "a store, built")
	} else {
		require.ErrorContains(t, err, "panicked")
	}
	s, err = Open(ctx, db, spec)
	require.NoError(t, err, "built again")
	require.NotNil(t, s.(*logStore))
	put(t, db, s, "a", "k", t0.Add(time.Hour), value("v"))
	require.Equal(t, value("v"), get(t, db, s, "a", "k"))
}
