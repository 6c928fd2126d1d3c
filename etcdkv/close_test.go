package etcdkv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// A database on etcd closed under a load of ledger.Do calls (a shutdown
// that did not wait for its callers) answers each call with its stored
// answer, kv.ErrClosed (nothing written), or kv.ErrCommitUnknown (a commit
// sent when the client closed: it may have applied), never the client's
// own connection error, which idemhttp would answer 500 rather than 503.
// After a reopen, every call that succeeded replays, and a call that met
// kv.ErrClosed left no record.
func TestCloseUnderLoadAnswersErrClosed(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	// Requests have all the time in the world: a call must end with the
	// Close, not with its request's deadline (the client retries some
	// requests on a closing connection until then).
	open := func() *ledger.Ledger {
		b, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: "/close/", RequestTimeout: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		db, err := kv.New(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ledger.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ctx := context.Background()
	req := func(key string) ledger.Request {
		return ledger.Request{Scope: "acme|POST /v1/orders", Key: key, Fingerprint: ledger.Fingerprint{1}}
	}
	work := func(key string) ledger.Work {
		return func(tx kv.Tx) (ledger.Response, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return ledger.Response{}, err
			}
			if err := b.Put([]byte(key), []byte("placed")); err != nil {
				return ledger.Response{}, err
			}
			return ledger.Response{Status: 201, Body: []byte(key)}, nil
		}
	}

	l := open()
	outcomes := kvtest.CloseUnderLoad(t, 8, 6, func(key string) error {
		_, err := l.Do(ctx, req(key), work(key))
		return err
	}, l.DB().Close)

	l2 := open()
	defer l2.DB().Close()
	succeeded, unknown := 0, 0
	for _, o := range outcomes {
		var stored bool
		err := l2.DB().View(ctx, func(tx kv.Tx) error {
			stored = tx.Bucket([]byte("orders")).Get([]byte(o.Key)) != nil
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case o.Err == nil:
			succeeded++
			res, err := l2.Do(ctx, req(o.Key), work(o.Key))
			if err != nil || !res.Replayed || !stored {
				t.Errorf("%s succeeded: after a reopen, stored %v, replayed %v, %v", o.Key, stored, res.Replayed, err)
			}
		case errors.Is(o.Err, kv.ErrCommitUnknown):
			unknown++
		case errors.Is(o.Err, kv.ErrClosed):
			if stored {
				t.Errorf("%s failed with %v, and its order is stored", o.Key, o.Err)
			}
		default:
			t.Errorf("%s: %v, want kv.ErrClosed or kv.ErrCommitUnknown", o.Key, o.Err)
		}
	}
	if succeeded == 0 {
		t.Fatal("no call succeeded before the Close")
	}
	t.Logf("%d calls succeeded, %d ended unknown, %d closed", succeeded, unknown, len(outcomes)-succeeded-unknown)
}
