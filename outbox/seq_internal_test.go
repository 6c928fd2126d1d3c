package outbox

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// The numbers of a store with several writers: increasing within a
// prefix, below 2^63, never 0; a new prefix when the counter wraps.
func TestSeqsFollowTheOrderOfAdding(t *testing.T) {
	t.Parallel()
	var s seqs
	first := s.next()
	require.NotZero(t, first>>32, "a prefix drawn: processes do not all count from 1")
	require.Less(t, first, uint64(1)<<63)
	require.Equal(t, first+1, s.next())
	require.Equal(t, first+2, s.next())

	s.n = math.MaxUint32 - 1
	last := s.next()
	require.Equal(t, uint32(math.MaxUint32), uint32(last))
	wrapped := s.next()
	require.Equal(t, uint32(1), uint32(wrapped), "its counter from 1")
	require.NotEqual(t, first>>32, wrapped>>32, "under a new prefix: the old one's numbers are taken")
	require.NotZero(t, wrapped>>32)
	require.Less(t, wrapped, uint64(1)<<63)
}

// A number another process holds (it drew the same prefix) is not
// reused: the outbox draws a new prefix and goes on.
func TestATakenNumberDrawsANewPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, o := severalWritersOutbox(t)
	seq, _, err := o.Add(ctx, Event{ID: "a", Topic: "t"})
	require.NoError(t, err)
	o.shared.seqs.n = uint32(seq) - 1 // the next number is a's
	seq2, added, err := o.Add(ctx, Event{ID: "b", Topic: "t"})
	require.NoError(t, err)
	require.True(t, added)
	require.NotEqual(t, seq, seq2)
	require.NotEqual(t, seq>>32, seq2>>32, "a new prefix")
	var ids []string
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		ids = nil
		for ev, err := range Events(tx, EventPending) {
			require.NoError(t, err)
			ids = append(ids, ev.ID)
		}
		return nil
	}))
	require.ElementsMatch(t, []string{"a", "b"}, ids, "a kept, b added beside it")
}

// severalWritersOutbox is an outbox over a bbolt file presented as a
// store with several writers (etcd's numbering and order).
func severalWritersOutbox(t *testing.T) (*kv.DB, *Outbox) {
	t.Helper()
	kvtest.RequireLocal(t, "presents a bbolt file as a store of several writers")
	db, err := kv.New(severalWriters{kvtest.Open(t, nil)}, nil)
	require.NoError(t, err)
	return db, New(db)
}

// severalWriters presents a backend as one with several writers.
type severalWriters struct{ kv.Backend }

func (b severalWriters) Traits() kv.Traits {
	t := b.Backend.Traits()
	t.SingleWriter, t.GroupCommit = false, false
	return t
}
