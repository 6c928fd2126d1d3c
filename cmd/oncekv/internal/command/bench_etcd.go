package command

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/oncekv/oncekv/bench"
	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/embedded"
	"github.com/oncekv/oncekv/kv"
)

// etcdBench holds the cluster bench --against-etcd measures: the one at
// the endpoints given, or a three-member cluster embedded in this process
// ("embedded"), with etcd's fsync on when --sync is.
type etcdBench struct {
	endpoints string
	cluster   *embedded.Cluster
	dir       string
	client    *clientv3.Client
	prefix    string // this invocation's keys, deleted at the end
}

func startEtcdBench(spec string, sync bool) (*etcdBench, error) {
	eb := &etcdBench{endpoints: spec}
	if spec == "embedded" {
		dir, err := os.MkdirTemp("", "oncekv-bench-etcd-")
		if err != nil {
			return nil, err
		}
		c, err := embedded.Start(embedded.Options{Members: 3, Dir: dir, Fsync: sync})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("embedded etcd: %w", err)
		}
		eb.cluster, eb.dir, eb.endpoints = c, dir, c.Endpoints()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eb.endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		eb.close()
		return nil, err
	}
	eb.client = cli
	var id [6]byte
	_, _ = rand.Read(id[:])
	eb.prefix = "/oncekv-bench/" + hex.EncodeToString(id[:]) + "/"
	return eb, nil
}

// workloads returns the bare write and the ledger on etcd, named
// etcd-bare and oncekv-etcd, each on a prefix of its own, and the
// ledger's backend (whose GuessStats the run reports).
func (eb *etcdBench) workloads(ctx context.Context, cfg bench.HarnessConfig) ([]bench.Workload, *etcdkv.Backend, error) {
	backends := map[string]*etcdkv.Backend{}
	open := func(name string) (*kv.DB, error) {
		b, err := etcdkv.New(eb.client, &etcdkv.Options{Prefix: fmt.Sprintf("%s%d/%s/", eb.prefix, cfg.Clients, name)})
		if err != nil {
			return nil, err
		}
		backends[name] = b
		return kv.New(b, nil)
	}
	bare, err := bench.BareWorkload("etcd-bare", cfg, open, false)
	if err != nil {
		return nil, nil, err
	}
	once, err := bench.LedgerWorkload(ctx, "oncekv-etcd", cfg, open, false)
	if err != nil {
		_ = bare.Close()
		return nil, nil, err
	}
	return []bench.Workload{bare, once}, backends["oncekv-etcd"], nil
}

// close deletes this invocation's keys (and its prefixes' registry
// entries) and stops an embedded cluster.
func (eb *etcdBench) close() {
	if eb.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = etcdkv.Drop(ctx, eb.client, eb.prefix)
		cancel()
		_ = eb.client.Close()
	}
	if eb.cluster != nil {
		eb.cluster.Close()
		_ = os.RemoveAll(eb.dir)
	}
}
