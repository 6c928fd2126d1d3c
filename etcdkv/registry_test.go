package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
)

// registry is the key space where backends record their prefixes
// (etcdkv's registryRoot).
const registry = "\x00oncekv/prefixes/"

// A database whose prefix begins with another's, or is the beginning of
// another's, is refused before it reads or writes anything: its keys
// would fall inside the other's ranges. Siblings are fine, and so is the
// same prefix opened again.
func TestNestedPrefixesAreRefused(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx := context.Background()
	open := func(prefix string, o etcdkv.Options) *etcdkv.Backend {
		t.Helper()
		o.Prefix = prefix
		b, err := etcdkv.Open(c.Endpoints(), &o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	write := func(b *etcdkv.Backend) error {
		return b.Update(ctx, func(tx kv.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return bk.Put([]byte("o1"), []byte("paid"))
		})
	}
	read := func(b *etcdkv.Backend) (string, error) {
		var got string
		err := b.View(ctx, func(tx kv.Tx) error {
			c := tx.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				got += string(k) + " "
			}
			return nil
		})
		return got, err
	}
	app := open("/app/", etcdkv.Options{})
	if err := write(app); err != nil {
		t.Fatal(err)
	}
	raw := app.Client()
	snapshot := func() map[string]string {
		t.Helper()
		resp, err := raw.Get(ctx, "\x00", clientv3.WithFromKey())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, kv := range resp.Kvs {
			m[string(kv.Key)] = string(kv.Value)
		}
		return m
	}
	before := snapshot()
	if _, ok := before[registry+"/app/"]; !ok {
		t.Fatalf("the first write did not record its prefix: %q", before)
	}

	// "/app/b/" is the case that bites: its keys start with "/app/" + "b",
	// which is where "/app/" keeps its bucket names.
	for _, nested := range []string{"/app/b/", "/app/billing/", "/app/x/", "/app", "/", "/a"} {
		for _, o := range []etcdkv.Options{{}, {MaxTxOps: 8}} { // 8: the read of the registry takes several requests
			b := open(nested, o)
			if got, err := read(b); !errors.Is(err, etcdkv.ErrNestedPrefix) || !strings.Contains(err.Error(), `"/app/"`) {
				t.Fatalf("%q (MaxTxOps %d): View gave %q, %v; want ErrNestedPrefix naming \"/app/\"", nested, o.MaxTxOps, got, err)
			}
			if err := write(b); !errors.Is(err, etcdkv.ErrNestedPrefix) {
				t.Fatalf("%q (MaxTxOps %d): Update gave %v, want ErrNestedPrefix", nested, o.MaxTxOps, err)
			}
		}
	}
	if after := snapshot(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("refused databases changed the cluster:\nbefore %q\nafter  %q", before, after)
	}

	// Siblings, and the same prefix again.
	for _, sibling := range []string{"/apps/", "/app2/", "/b/"} {
		if err := write(open(sibling, etcdkv.Options{MaxTxOps: 8})); err != nil {
			t.Fatalf("sibling %q: %v", sibling, err)
		}
	}
	again := open("/app/", etcdkv.Options{})
	if got, err := read(again); err != nil || got != "orders " {
		t.Fatalf("reopened /app/ reads %q, %v; want its one bucket", got, err)
	}
	if err := write(again); err != nil {
		t.Fatal(err)
	}

	// A database that only reads records nothing, so a mistyped prefix
	// given to a read-only tool blocks no one; once a nested one writes,
	// the reader is refused too.
	ro := open("/ro/", etcdkv.Options{})
	if _, err := read(ro); err != nil {
		t.Fatal(err)
	}
	if _, ok := snapshot()[registry+"/ro/"]; ok {
		t.Fatal("a read-only backend recorded its prefix")
	}
	if err := write(open("/ro/x/", etcdkv.Options{})); err != nil {
		t.Fatal(err)
	}
	if _, err := read(open("/ro/", etcdkv.Options{})); !errors.Is(err, etcdkv.ErrNestedPrefix) {
		t.Fatalf("reading /ro/ under a recorded /ro/x/ gave %v, want ErrNestedPrefix", err)
	}

	// Once an entry is deleted (the database is gone), the nested prefix
	// opens.
	if _, err := raw.Delete(ctx, registry+"/ro/x/"); err != nil {
		t.Fatal(err)
	}
	if err := write(open("/ro/", etcdkv.Options{})); err != nil {
		t.Fatal(err)
	}

	// Drop deletes a database and its entry, and nothing beside it.
	if err := etcdkv.Drop(ctx, raw, "/ro/"); err != nil {
		t.Fatal(err)
	}
	for k := range snapshot() {
		if strings.HasPrefix(k, "/ro/") || strings.HasPrefix(k, registry+"/ro/") {
			t.Fatalf("Drop left %q", k)
		}
	}
	if got, err := read(open("/app/", etcdkv.Options{})); err != nil || got != "orders " {
		t.Fatalf("after dropping /ro/, /app/ reads %q, %v", got, err)
	}
	if err := write(open("/ro/x/", etcdkv.Options{})); err != nil {
		t.Fatalf("a prefix nested in a dropped one: %v", err)
	}
	if got, err := read(open("/ro/x/", etcdkv.Options{})); err != nil || got != "orders " {
		t.Fatalf("/ro/x/ reads %q, %v, want only its own bucket", got, err)
	}
	// The registry as an operator lists it: every recorded prefix, in key
	// order, with when it was recorded.
	list, err := etcdkv.Prefixes(ctx, raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list {
		names = append(names, r.Prefix)
		if r.At.IsZero() {
			t.Fatalf("%q has no recording time", r.Prefix)
		}
	}
	if want := []string{"/app/", "/app2/", "/apps/", "/b/", "/ro/x/"}; fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("Prefixes: %q, want %q", names, want)
	}
	if first, err := etcdkv.Prefixes(ctx, raw, 2); err != nil || len(first) != 2 || first[1].Prefix != "/app2/" {
		t.Fatalf("Prefixes with a limit of 2: %v, %v", first, err)
	}
	for _, p := range []string{"", "\x00oncekv/"} {
		if err := etcdkv.Drop(ctx, raw, p); !errors.Is(err, etcdkv.ErrInvalidOptions) {
			t.Fatalf("Drop(%q): %v, want ErrInvalidOptions", p, err)
		}
	}
}

// Two nested prefixes opened at the same moment: exactly one is recorded,
// the other refused. Without the registry's version compare both reads
// see an empty registry and both write.
func TestRacingNestedPrefixesOneWins(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx := context.Background()
	for round := range 30 {
		prefixes := []string{fmt.Sprintf("/race/%d/", round), fmt.Sprintf("/race/%d/b/", round)}
		errs := make([]error, len(prefixes))
		var start, done sync.WaitGroup
		start.Add(1)
		for i, p := range prefixes {
			b, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: p})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				errs[i] = b.Update(ctx, func(tx kv.Tx) error {
					_, err := tx.CreateBucketIfNotExists([]byte("x"))
					return err
				})
			}()
		}
		start.Done()
		done.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, etcdkv.ErrNestedPrefix):
				t.Fatalf("round %d, %q: %v", round, prefixes[i], err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d of the nested prefixes %q opened, want exactly 1", round, won, prefixes)
		}
	}
}

// A prefix that begins with NUL would reach into the registry.
func TestPrefixBeginningWithNULIsRefused(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"\x00", "\x00oncekv/", registry + "x/"} {
		if _, err := etcdkv.Open("http://127.0.0.1:1", &etcdkv.Options{Prefix: p}); !errors.Is(err, etcdkv.ErrInvalidOptions) {
			t.Fatalf("prefix %q: %v, want ErrInvalidOptions", p, err)
		}
	}
}

// A service whose etcd user may touch only its own prefix (etcd's RBAC)
// cannot read the registry: it skips the check and works as before. A
// role granted the registry's keys as well gets the check.
func TestPrefixCheckUnderRBAC(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx := context.Background()
	eps := strings.Split(c.Endpoints(), ",")
	connect := func(user string) *clientv3.Client {
		t.Helper()
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Username: user, Password: user + "pw", Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	root := connect("")
	grant := func(role string, prefixes ...string) []func() error {
		steps := []func() error{
			func() error { _, err := root.RoleAdd(ctx, role); return err },
			func() error { _, err := root.UserAdd(ctx, role, role+"pw"); return err },
			func() error { _, err := root.UserGrantRole(ctx, role, role); return err },
		}
		for _, p := range prefixes {
			steps = append(steps, func() error {
				_, err := root.RoleGrantPermission(ctx, role, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			})
		}
		return steps
	}
	steps := []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
	}
	steps = append(steps, grant("orders", "/svc/orders/")...)              // its prefix only
	steps = append(steps, grant("billing", "/svc/orders/b/", registry)...) // and the registry
	steps = append(steps, func() error { _, err := root.AuthEnable(ctx); return err })
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	open := func(user, prefix string) error {
		b, err := etcdkv.New(connect(user), &etcdkv.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		db, err := kv.New(b, nil)
		if err != nil {
			return err
		}
		defer db.Close()
		return db.Update(ctx, func(tx kv.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return bk.Put([]byte("o1"), []byte("paid"))
		})
	}
	if err := open("orders", "/svc/orders/"); err != nil {
		t.Fatalf("a service that may not read the registry: %v", err)
	}
	if err := open("root", "/svc/orders/"); err != nil { // records it
		t.Fatal(err)
	}
	if err := open("billing", "/svc/orders/b/"); !errors.Is(err, etcdkv.ErrNestedPrefix) {
		t.Fatalf("a service granted the registry, nested: %v, want ErrNestedPrefix", err)
	}
}
