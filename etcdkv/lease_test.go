package etcdkv_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/kv"
)

// Commit markers are spread over leases of a bounded number of markers:
// etcd deletes an expired lease's keys in one transaction that every write
// of the cluster waits for (a minute of markers at 1,000 commits a second
// held writes for a third of a second). Not parallel: it sets the bound.
func TestMarkerLeasesCarryBoundedMarkers(t *testing.T) {
	defer etcdkv.SetMarkersPerLease(3)()
	db, c := openDB(t, "/leases/")
	ctx := context.Background()
	for i := range 10 {
		if err := db.Update(ctx, func(tx kv.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return bk.Put(fmt.Appendf(nil, "o%d", i), []byte("v"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.Endpoints(), ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "/leases/t", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	perLease := map[int64]int{}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 {
			t.Fatalf("marker %q has no lease: it would stay for ever", kv.Key)
		}
		perLease[kv.Lease]++
	}
	n := len(resp.Kvs)
	if n != 11 {
		t.Fatalf("%d markers, want one a commit (10, and kv.New's stamp of the format)", n)
	}
	for id, n := range perLease {
		if n > 3 {
			t.Errorf("lease %x carries %d markers, more than the bound of 3", id, n)
		}
	}
	if len(perLease) != 4 {
		t.Errorf("%d leases for 11 markers three a lease, want 4: %v", len(perLease), perLease)
	}
}
