package etcdkv

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/oncekv/oncekv/etcdkv/etcdtest"
)

// Settling a lost answer: a commit whose marker is absent is fenced (it
// did not apply, and the original Txn, should it arrive late, can no
// longer apply); a marker present says the commit applied.
func TestResolveFencesOrConfirms(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	b, err := Open(c.Endpoints(), &Options{Prefix: "/fence/"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	lost := errors.New("answer lost")

	marker := b.keys.marker(newID())
	applied, err := b.resolve(ctx, marker, lost)
	if err != nil || applied {
		t.Fatalf("resolve of a commit that never arrived: applied %v, %v; want false, nil", applied, err)
	}
	// The fence is a marker like the others: it lives on a lease, and
	// vanishes with it instead of staying for ever, one key a lost answer.
	got, err := b.c.Get(ctx, marker)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "aborted" || got.Kvs[0].Lease == 0 {
		t.Fatalf("the fence: %v; want the marker \"aborted\", on a lease", got.Kvs)
	}
	// The original commit arrives late: its marker compare fails.
	resp, err := b.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(marker), "=", 0)).
		Then(clientv3.OpPut(marker, "committed"), clientv3.OpPut(b.keys.prefix+"late", "x")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatal("a fenced commit applied when it arrived late")
	}

	marker = b.keys.marker(newID())
	if _, err := b.c.Put(ctx, marker, "committed"); err != nil {
		t.Fatal(err)
	}
	applied, err = b.resolve(ctx, marker, lost)
	if err != nil || !applied {
		t.Fatalf("resolve of a commit that applied: applied %v, %v; want true, nil", applied, err)
	}
	if retryable(errors.Join(ErrCommitUnknown, context.DeadlineExceeded)) {
		t.Fatal("an unknown outcome must not be retried: the commit may have applied")
	}
}
