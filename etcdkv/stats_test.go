package etcdkv_test

import (
	"context"
	"errors"
	"testing"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
)

// Stats counts what a backend's transactions met, each case made to
// happen on a real cluster: a commit refused because another process wrote
// a key read, a transaction refused on every attempt (going solo on the
// way), a read whose revision was compacted away. Counters carries the
// same counts, by name, to kv.DB.Counters and so to the metrics adapters.
// (TestLostCommitAnswerIsSettled counts lost answers.)
func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := client(t, c)
	a, err := etcdkv.New(cli, &etcdkv.Options{Prefix: "/stats/", NoGuessing: true, MaxAttempts: 3, SoloAfter: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := etcdkv.New(client(t, c), &etcdkv.Options{Prefix: "/stats/"})
	if err != nil {
		t.Fatal(err)
	}
	put(t, a, "k", "0")

	// b writes k between a's read of it and a's commit, in the first run,
	// then in every run.
	runs := 0
	appendTo := func(interfere func(run int) bool) func(kv.Tx) error {
		return func(tx kv.Tx) error {
			runs++
			bk := tx.Bucket([]byte("a"))
			v := string(bk.Get([]byte("k")))
			if interfere(runs) {
				put(t, b, "k", "b")
			}
			return bk.Put([]byte("k"), []byte(v+"a"))
		}
	}
	if err := a.Update(ctx, appendTo(func(run int) bool { return run == 1 })); err != nil {
		t.Fatal(err)
	}
	if runs != 2 || get(t, a, "k") != "ba" {
		t.Fatalf("%d runs, k = %q; want 2 runs, ba", runs, get(t, a, "k"))
	}
	runs = 0
	if err := a.Update(ctx, appendTo(func(int) bool { return true })); !errors.Is(err, etcdkv.ErrConflict) {
		t.Fatalf("a transaction refused every time returned %v, want ErrConflict", err)
	}

	// A read at a revision compacted away: the View runs again.
	runs = 0
	if err := a.View(ctx, func(tx kv.Tx) error {
		runs++
		tx.Bucket([]byte("a")).Get([]byte("k")) // fixes the revision
		if runs == 1 {
			put(t, b, "other", "x")
			resp, err := cli.Get(ctx, "/")
			if err != nil {
				return err
			}
			if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
				return err
			}
		}
		tx.Bucket([]byte("a")).Get([]byte("other"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Fatalf("the view ran %d times, want 2", runs)
	}

	want := etcdkv.Stats{Updates: 3, Conflicts: 1 + 3, Exhausted: 1, Solo: 1, Retried: 1}
	if got := a.Stats(); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
	counts := map[string]uint64{}
	for _, c := range dbOn(t, a, nil).Counters() { // its format record: one update more
		if c.Unit == "" || c.Description == "" {
			t.Errorf("counter %q has no unit or description", c.Name)
		}
		counts[c.Name] = c.Value
	}
	wantCounts := map[string]uint64{"updates": 4, "conflicts": 4, "exhausted": 1, "solo": 1, "retried": 1, "answers_lost": 0, "unknown": 0,
		"guesses": 0, "guesses.committed": 0, "guesses.refused": 0, "guesses.conflicted": 0, "guesses.void": 0, "guesses.paused": 0}
	if len(counts) != len(wantCounts) {
		t.Errorf("counters %v, want %v", counts, wantCounts)
	}
	for name, n := range wantCounts {
		if counts[name] != n {
			t.Errorf("counter %s = %d, want %d", name, counts[name], n)
		}
	}
}
