package recstore

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// The directory's rebuild (at a process's first Open) meets a page the
// disk cannot read as kv's transactions do: kv.ErrReadFailed, and the
// database refuses calls (Close included: it returns). It ran in a raw
// bbolt transaction, where the fault ended the process (a service started
// just as its disk failed). The file is cut short beneath the process,
// which faults as a failing disk does.
func TestAFaultInTheRebuildIsAnError(t *testing.T) {
	kvtest.RequireLocal(t, "cuts the bbolt file short")
	path := filepath.Join(t.TempDir(), "r.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	counted := Spec{Name: "counted", Group: func(scope []byte) []byte { return scope }}
	s, err := Open(ctx, db, counted)
	require.NoError(t, err)
	for i := range 1000 { // some 60 leaf pages
		put(t, db, s, "a", fmt.Sprint("k-", i), t0, value(string(make([]byte, 200))))
	}
	require.NoError(t, db.Close())

	db, err = kv.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, os.Truncate(path, 4*int64(db.PageSize())))
	fresh := &logStore{spec: counted, log: counted.logNS(), tail: counted.tailNS(), dir: newDirectory(0), tally: newTally(counted)}
	err = rebuildIn(ctx, db, fresh)
	require.ErrorIs(t, err, kv.ErrReadFailed)
	require.ErrorIs(t, db.Err(), kv.ErrReadFailed)
}
