package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/embedded"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// Two replicas of a service share one ledger on etcd: a retry that lands
// on the second finds the first's answer. (A real deployment passes its
// cluster's endpoints; the example runs a one-member cluster in process.)
func Example() {
	dir, _ := os.MkdirTemp("", "etcdkv-example-")
	defer os.RemoveAll(dir)
	cluster, err := embedded.Start(embedded.Options{Members: 1, Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	replica := func() *ledger.Ledger {
		b, err := etcdkv.Open(cluster.Endpoints(), &etcdkv.Options{Prefix: "/payments/"})
		if err != nil {
			log.Fatal(err)
		}
		db, err := kv.New(b, nil) // Close on db closes b
		if err != nil {
			log.Fatal(err)
		}
		l, err := ledger.New(db, nil)
		if err != nil {
			log.Fatal(err)
		}
		return l
	}
	a, b := replica(), replica()
	defer a.DB().Close()
	defer b.DB().Close()

	req := ledger.Request{Scope: "acme|POST /v1/orders", Key: "order-1", Fingerprint: ledger.Fingerprint{1}}
	create := func(kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: 201, Body: []byte(`{"id":"ord_1"}`)}, nil
	}
	ctx := context.Background()
	first, _ := a.Do(ctx, req, create)
	retry, _ := b.Do(ctx, req, create) // the retry, on the other replica
	fmt.Println(first.Replayed, string(first.Response.Body))
	fmt.Println(retry.Replayed, string(retry.Response.Body))
	// Output:
	// false {"id":"ord_1"}
	// true {"id":"ord_1"}
}

// A database whose prefix nests in another's is refused before it reads or
// writes; once the other is dropped, the prefix opens.
func ExampleDrop() {
	dir, _ := os.MkdirTemp("", "etcdkv-example-")
	defer os.RemoveAll(dir)
	cluster, err := embedded.Start(embedded.Options{Members: 1, Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	ctx := context.Background()
	open := func(prefix string) (*kv.DB, error) {
		b, err := etcdkv.Open(cluster.Endpoints(), &etcdkv.Options{Prefix: prefix})
		if err != nil {
			return nil, err
		}
		db, err := kv.New(b, nil) // reads (and records) the prefix
		if err != nil {
			_ = b.Close()
		}
		return db, err
	}
	app, err := open("/app/")
	fmt.Println(err)
	_, err = open("/app/billing/")
	fmt.Println(errors.Is(err, etcdkv.ErrNestedPrefix))

	// "/app/" is retired: close it, drop it (with any client of the
	// cluster), and "/app/billing/" opens.
	_ = app.Close()
	client, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(cluster.Endpoints(), ",")})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := etcdkv.Drop(ctx, client, "/app/"); err != nil {
		log.Fatal(err)
	}
	billing, err := open("/app/billing/")
	fmt.Println(err)
	_ = billing.Close()
	// Output:
	// <nil>
	// true
	// <nil>
}
