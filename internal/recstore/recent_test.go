package recstore

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
)

// cachedValue asks the cache, as a reader outside any transaction does.
func cachedValue(s *logStore, scope, key string) ([]byte, bool) {
	p, ok := s.Probe(scope, key)
	if !ok {
		return nil, false
	}
	_, v, ok := s.Cached(ctx, p, scope, key)
	return v, ok
}

// An entry is cached once its transaction commits, never while it runs
// nor when it rolls back; a change to it (overwrite, move, delete) removes
// it inside the changing transaction, before that commits.
func TestRecentEntriesFollowCommits(t *testing.T) {
	db, s := open(t)
	exp := t0.Add(time.Hour)

	// Rolled back: never cached.
	err := db.Update(ctx, func(tx kv.Tx) error {
		if _, err := s.Put(ctx, tx, "s", "k", Ref{}, time.Time{}, exp, value("v0")); err != nil {
			return err
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	_, ok := cachedValue(s, "s", "k")
	require.False(t, ok, "a rolled-back write is cached")

	// Committed: cached after the commit, not before.
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		if _, err := s.Put(ctx, tx, "s", "k", Ref{}, time.Time{}, exp, value("v1")); err != nil {
			return err
		}
		_, ok := cachedValue(s, "s", "k")
		require.False(t, ok, "an uncommitted write is visible in the cache")
		return nil
	}))
	v, ok := cachedValue(s, "s", "k")
	require.True(t, ok)
	require.Equal(t, value("v1"), v)
	require.Equal(t, 1, s.Stats().Cached)

	// Another key never reads it, even at the same position.
	p, _ := s.Probe("s", "k")
	_, _, ok = s.Cached(ctx, p, "s", "other")
	require.False(t, ok)
	// A done context is left to the read transaction to report.
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, _, ok = s.Cached(done, p, "s", "k")
	require.False(t, ok)

	// Overwritten in place (same expiry second): gone from the cache as
	// soon as the writer changes it; the new value after its commit.
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, _, err := s.Get(tx, "s", "k")
		if err != nil {
			return err
		}
		if _, err := s.Put(ctx, tx, "s", "k", ref, exp, exp, value("v2")); err != nil {
			return err
		}
		_, ok := cachedValue(s, "s", "k")
		require.False(t, ok, "the old value is still cached while it is being replaced")
		return nil
	}))
	v, _ = cachedValue(s, "s", "k")
	require.Equal(t, value("v2"), v)

	// An overwrite rolled back: the old value is read from the log again
	// (it is still the committed one), and not cached.
	err = db.Update(ctx, func(tx kv.Tx) error {
		ref, _, _ := s.Get(tx, "s", "k")
		if _, err := s.Put(ctx, tx, "s", "k", ref, exp, exp, value("v3")); err != nil {
			return err
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	_, ok = cachedValue(s, "s", "k")
	require.False(t, ok)
	require.Equal(t, value("v2"), get(t, db, s, "s", "k"))
	put(t, db, s, "s", "k", exp, value("v2")) // cached again

	// Moved (another expiry): the new position is cached, the old one not.
	var old Ref
	require.NoError(t, db.View(ctx, func(tx kv.Tx) (err error) { old, _, err = s.Get(tx, "s", "k"); return err }))
	require.NotNil(t, s.dir.cached(s.dir.hash("s", "k"), old.pos))
	put(t, db, s, "s", "k", exp.Add(time.Hour), value("v4"))
	require.Nil(t, s.dir.cached(s.dir.hash("s", "k"), old.pos), "the moved-from position is still cached")
	v, _ = cachedValue(s, "s", "k")
	require.Equal(t, value("v4"), v)

	// Deleted: removed inside the deleting transaction.
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, _, _ := s.Get(tx, "s", "k")
		if err := s.Delete(tx, "s", "k", ref, time.Time{}); err != nil {
			return err
		}
		_, ok := cachedValue(s, "s", "k")
		require.False(t, ok, "a deleted record is still cached before the delete commits")
		return nil
	}))
	_, ok = cachedValue(s, "s", "k")
	require.False(t, ok)
	require.Zero(t, s.Stats().Cached)
	require.Zero(t, s.Stats().CachedBytes)
}

// bbolt runs OnCommit after it releases the writer lock: a later
// transaction can change a position before the entry written there is
// cached. The cache then refuses the late entry.
func TestLateEntryAfterAChangeIsRefused(t *testing.T) {
	_, s := open(t)
	h := s.dir.hash("s", "k")
	gen := s.dir.generation(h) // taken inside the writing transaction
	s.dir.forget(h, 42)        // a later transaction changes the position
	s.dir.remember(h, 42, gen, wrap("s", "k", value("stale")))
	require.Nil(t, s.dir.cached(h, 42))

	gen = s.dir.generation(h)
	s.dir.remember(h, 42, gen, wrap("s", "k", value("fresh")))
	require.NotNil(t, s.dir.cached(h, 42))
}

// Sweeps (Kind.Expire) and rekeys (Kind.Rewrite) change log entries
// without the store's Put and Delete: they remove them from the cache too.
func TestSweepAndRewriteForgetCachedEntries(t *testing.T) {
	db, s := open(t)
	k := &Kind[string]{
		Spec:     spec,
		KindName: "test",
		Decode: func(_, _ string, v []byte, _ bool) (string, error) {
			return "", nil
		},
		ExpiresAt: func(string) time.Time { return t0 },
	}
	put(t, db, s, "s", "swept", t0, value("a"))
	put(t, db, s, "s", "rekeyed", t0.Add(time.Hour), value("b"))
	_, ok := cachedValue(s, "s", "swept")
	require.True(t, ok)

	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		due := k.Due(tx, t0.Add(time.Minute), nil, 10)
		require.Len(t, due, 1)
		gone, why, err := k.Expire(tx, due[0], t0.Add(time.Minute), false)
		require.True(t, gone, why)
		_, ok := cachedValue(s, "s", "swept")
		require.False(t, ok, "a swept record is still cached before the sweep commits")
		return err
	}))

	require.Equal(t, 1, positions(s), "the swept record's directory entry stays after the commit")

	_, ok = cachedValue(s, "s", "rekeyed")
	require.True(t, ok)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		_, n, err := k.Rewrite(tx, nil, 10, func(_, key string, v []byte) ([]byte, error) {
			return value("resealed"), nil
		})
		require.Equal(t, 1, n)
		return err
	}))
	_, ok = cachedValue(s, "s", "rekeyed")
	require.False(t, ok, "a rewritten record keeps its old cached bytes")
	require.Equal(t, value("resealed"), get(t, db, s, "s", "rekeyed"))
}

// The cache keeps within its bound, evicting the oldest entries first,
// and its bookkeeping stays bounded however many entries come and go.
func TestRecentCacheIsBounded(t *testing.T) {
	_, s := open(t)
	sh := &s.dir.shards[0].recent
	h := uint64(0) // shard 0
	entry := make([]byte, 1000)
	n := 3 * s.dir.recentShardBytes / len(entry)
	for i := 1; i <= n; i++ {
		s.dir.remember(h, uint64(i), s.dir.generation(h), entry)
		require.LessOrEqual(t, sh.bytes, s.dir.recentShardBytes)
	}
	require.Nil(t, s.dir.cached(h, 1), "the oldest entry is still cached")
	require.NotNil(t, s.dir.cached(h, uint64(n)), "the newest entry was evicted")
	require.Equal(t, len(sh.entries)*len(entry), sh.bytes)

	// Entries removed as fast as they come: the order does not grow.
	for i := n + 1; i <= 20*n; i++ {
		s.dir.remember(h, uint64(i), s.dir.generation(h), entry)
		require.LessOrEqual(t, len(sh.order), 2*len(sh.entries)+64)
		s.dir.forget(h, uint64(i))
	}
	// The entries still held are the newest of the first run; filled to
	// the bound again, every entry added evicts exactly the oldest held.
	next := uint64(30 * n)
	for (len(sh.entries)+1)*len(entry) <= s.dir.recentShardBytes {
		next++
		s.dir.remember(h, next, s.dir.generation(h), entry)
	}
	oldest := 1
	for s.dir.cached(h, uint64(oldest)) == nil {
		oldest++
	}
	for ; oldest <= n; oldest++ {
		next++
		s.dir.remember(h, next, s.dir.generation(h), entry)
		require.Nil(t, s.dir.cached(h, uint64(oldest)), "entry %d outlived the eviction of the oldest", oldest)
		if oldest < n {
			require.NotNil(t, s.dir.cached(h, uint64(oldest+1)), "entry %d was evicted before an older one", oldest+1)
		}
	}

	s.dir.remember(h, 1<<40, s.dir.generation(h), make([]byte, s.dir.recentMaxEntry+1))
	require.Nil(t, s.dir.cached(h, 1<<40), "an entry over the size limit is cached")
	s.dir.remember(h, 1<<41, s.dir.generation(h), make([]byte, s.dir.recentMaxEntry))
	require.NotNil(t, s.dir.cached(h, 1<<41), "an entry of the size limit is not cached")
}

// A shard filled exactly to its bound keeps every entry.
func TestRecentCacheHoldsItsWholeBound(t *testing.T) {
	_, s := open(t)
	h := uint64(1) << 58 // shard 1
	entry := make([]byte, s.dir.recentShardBytes/8)
	for i := 1; i <= 8; i++ {
		s.dir.remember(h, uint64(i), s.dir.generation(h), entry)
	}
	n, bytes, _, _ := s.dir.recentStats()
	require.Equal(t, 8, n)
	require.Equal(t, s.dir.recentShardBytes, bytes)
	s.dir.remember(h, 9, s.dir.generation(h), entry)
	require.Nil(t, s.dir.cached(h, 1), "one over the bound evicts the oldest")
	require.NotNil(t, s.dir.cached(h, 2))
}

// After Close the cache stops answering: callers read the log and meet
// kv.ErrClosed as before.
func TestCacheStopsAtClose(t *testing.T) {
	db, s := open(t)
	put(t, db, s, "s", "k", t0.Add(time.Hour), value("v"))
	_, ok := cachedValue(s, "s", "k")
	require.True(t, ok)
	require.NoError(t, db.Close())
	_, ok = cachedValue(s, "s", "k")
	require.False(t, ok)
}

// Readers of the cache and writers replacing and deleting the same keys
// run together under -race; a reader never sees a value older than one it
// has seen already (a stale entry would go back in time).
func TestCacheUnderConcurrentChanges(t *testing.T) {
	db, s := open(t)
	const keys, rounds = 4, 200
	exp := t0.Add(time.Hour)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := map[string]string{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprint("k", r%keys)
				v, ok := cachedValue(s, "s", key)
				if !ok {
					continue
				}
				got := string(v) // the round that wrote it, zero-padded
				if got < last[key] {
					t.Errorf("%s went back from %q to %q", key, last[key], got)
					return
				}
				last[key] = got
			}
		}()
	}
	for i := range rounds {
		for k := range keys {
			key := fmt.Sprint("k", k)
			v := fmt.Appendf(nil, "%08d", i)
			require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
				ref, _, err := s.Get(tx, "s", key)
				if err != nil {
					return err
				}
				if i%3 == 2 && !ref.IsZero() {
					return s.Delete(tx, "s", key, ref, time.Time{})
				}
				// alternate expiry seconds: overwrites and moves both
				_, err = s.Put(ctx, tx, "s", key, ref, time.Time{}, exp.Add(time.Duration(i%2)*time.Second), v)
				return err
			}))
		}
	}
	close(stop)
	wg.Wait()
}

// A managed call's entries join the cache when the call says its
// transaction committed (Journal.Committed, on the caller's goroutine),
// not at the commit; a run undone never joins it.
func TestJournalAddsEntriesAfterTheCall(t *testing.T) {
	db, s := open(t)
	exp := t0.Add(time.Hour)
	j := &Journal{}
	write := func(keys ...string) { // one call, as the managed forms make it
		jctx := WithJournal(ctx, j)
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			j.Undo() // an earlier run that did not commit
			for _, key := range keys {
				if _, err := s.Put(jctx, tx, "s", key, Ref{}, time.Time{}, exp, value(key)); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	write("undone")
	j.Undo()
	write("k")
	_, ok := cachedValue(s, "s", "k")
	require.False(t, ok, "cached before the call said it committed")
	j.Committed()
	v, ok := cachedValue(s, "s", "k")
	require.True(t, ok)
	require.Equal(t, value("k"), v)
	_, ok = cachedValue(s, "s", "undone")
	require.False(t, ok, "an undone run's entry is cached")
	require.Equal(t, 1, s.Stats().Cached)

	// A call that wrote several records: every one joins the cache.
	j = &Journal{}
	write("k2", "k3", "k4")
	j.Committed()
	for _, k := range []string{"k2", "k3", "k4"} {
		v, ok := cachedValue(s, "s", k)
		require.True(t, ok, k)
		require.Equal(t, value(k), v)
	}
}

// kv.Options.RecentCacheBytes sets the cache's bound, split among the
// shards, and the largest entry kept; negative turns it off, and the
// store works as before from the file, through overwrites, deletes and a
// managed call's journal.
func TestRecentCacheFollowsItsOption(t *testing.T) {
	openWith := func(t *testing.T, bytes int) (*kv.DB, *logStore) {
		db, err := kv.Open(filepath.Join(t.TempDir(), "r.db"), &kv.Options{NoSync: true, RecentCacheBytes: bytes})
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		st, err := Open(ctx, db, spec)
		require.NoError(t, err)
		return db, st.(*logStore)
	}
	put := func(t *testing.T, db *kv.DB, s *logStore, key string, v []byte) {
		j := &Journal{}
		jctx := WithJournal(ctx, j)
		require.NoError(t, db.Update(jctx, func(tx kv.Tx) error {
			ref, _, err := s.Get(tx, "s", key)
			if err != nil {
				return err
			}
			_, err = s.Put(jctx, tx, "s", key, ref, time.Time{}, t0.Add(time.Hour), v)
			return err
		}))
		j.Committed()
	}

	t.Run("bounded", func(t *testing.T) {
		const bound = 64 * 4096 // 4 KiB a shard: entries up to 1 KiB
		db, s := openWith(t, bound)
		require.Equal(t, bound, db.RecentCacheBytes())
		require.Equal(t, 4096, s.dir.recentShardBytes)
		require.Equal(t, 1024, s.dir.recentMaxEntry)
		small, large := value("small"), value(string(make([]byte, 1100)))
		put(t, db, s, "small", small)
		put(t, db, s, "large", large)
		v, ok := cachedValue(s, "s", "small")
		require.True(t, ok)
		require.Equal(t, small, v)
		_, ok = cachedValue(s, "s", "large")
		require.False(t, ok, "an entry over a quarter of a shard's bound is cached")
		for i := range 2000 { // 1 MB of entries of 500 bytes
			put(t, db, s, fmt.Sprint("k", i), value(fmt.Sprintf("value %d %0490d", i, 0)))
		}
		st := s.Stats()
		require.LessOrEqual(t, st.CachedBytes, bound)
		require.Positive(t, st.Cached)
		require.Less(t, st.Cached, 2000, "every entry is still cached: the bound is not kept")
	})

	t.Run("off", func(t *testing.T) {
		db, s := openWith(t, -1)
		require.Zero(t, db.RecentCacheBytes())
		put(t, db, s, "k", value("v1"))
		put(t, db, s, "k", value("v2")) // overwritten in place
		_, ok := cachedValue(s, "s", "k")
		require.False(t, ok, "a record is cached with the cache off")
		require.Equal(t, value("v2"), get(t, db, s, "s", "k"))
		st := s.Stats()
		require.Zero(t, st.Cached)
		require.Zero(t, st.CacheHits)
		require.Equal(t, uint64(1), st.CacheMisses, "the look-up that read the file is not counted")
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			ref, _, err := s.Get(tx, "s", "k")
			if err != nil {
				return err
			}
			return s.Delete(tx, "s", "k", ref, t0.Add(time.Hour))
		}))
		require.Nil(t, get(t, db, s, "s", "k"))
	})
}
