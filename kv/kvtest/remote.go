package kvtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

// The remote protocol runs the test suites of oncekv's packages against
// another backend without copying them: Serve, in a test of the backend's
// own module (package etcdkv), serves backends over net/rpc on loopback;
// the package tests, run with ONCEKV_TEST_REMOTE=host:port, open every
// kvtest database on a fresh backend of the server instead of a bbolt file.
// A transaction's function runs in the test process; each Get, Put and
// cursor step is a call to the server, which holds the real transaction.
// When the backend runs a function again (an optimistic conflict), the
// server tells the client to run it again.

// EnvRemote names the environment variable that points kvtest at a server.
const EnvRemote = "ONCEKV_TEST_REMOTE"

// Serve serves backends on ln until ln is closed. newBackend makes the
// backend of a database name; the same name (a test's path, reopened)
// reaches the same data.
func Serve(ln net.Listener, newBackend func(name string) (kv.Backend, error)) error {
	srv := rpc.NewServer()
	rs := &remoteServer{newBackend: newBackend, txs: map[int64]*serverTx{}, backends: map[int64]kv.Backend{}, closing: make(chan struct{})}
	if err := srv.RegisterName("KV", rs); err != nil {
		return err
	}
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	defer func() {
		mu.Lock()
		for c := range conns {
			_ = c.Close() // ends the connection's goroutines, here and in the client
		}
		mu.Unlock()
		// Transactions a client left open (its process exited, or closed
		// its database while beginning one) end now, not after remoteIdle:
		// when Serve returns, no transaction of the server is running.
		rs.mu.Lock()
		rs.shut = true // no transaction begins from now on
		rs.mu.Unlock()
		close(rs.closing)
		rs.running.Wait()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return err
		}
		mu.Lock()
		conns[conn] = true
		mu.Unlock()
		go func() {
			srv.ServeConn(conn)
			mu.Lock()
			delete(conns, conn)
			mu.Unlock()
		}()
	}
}

// Wire types of the protocol.
type (
	// OpenArgs opens a database by name.
	OpenArgs struct{ Name string }
	// OpenReply carries the session and the backend's traits.
	OpenReply struct {
		Session      int64
		Name         string
		SingleWriter bool
		GroupCommit  bool
		MaxTxOps     int
	}
	// BeginArgs starts a transaction.
	BeginArgs struct {
		Session  int64
		Writable bool
	}
	// OpArgs is one operation in a transaction.
	OpArgs struct {
		Tx     int64
		Op     string // bucket, create, get, put, delete, seq, cursor, first, last, next, prev, seek, end, writable
		Bucket []byte // nil for the top-level bucket list
		Key    []byte
		Value  []byte
		Cursor int64
		Commit bool
	}
	// OpReply is an operation's result.
	OpReply struct {
		Key, Value []byte
		Found      bool
		Seq        uint64
		Cursor     int64
		Revision   int64 // the cursor's Revision(), when the backend's cursors have one
		Err        string
		// Is names the port's error Err is (an index into portErrors,
		// plus one), so that errors.Is holds on the client too.
		Is int
		// Restart asks the client to run its function again: the backend
		// is running it again (an optimistic conflict).
		Restart bool
	}
)

type remoteServer struct {
	newBackend func(string) (kv.Backend, error)
	mu         sync.Mutex
	next       int64
	backends   map[int64]kv.Backend
	byName     map[string]int64
	txs        map[int64]*serverTx
	// closing ends the transactions still waiting for their client when
	// Serve returns; running counts them.
	closing chan struct{}
	running sync.WaitGroup
	shut    bool
}

// serverTx runs one backend transaction whose function takes its
// operations from the client.
type serverTx struct {
	ops     chan serverOp
	cursors map[int64]kv.Cursor
	ncur    int64
	done    chan error
	// pendingEnd is the client's "end" call waiting for the outcome.
	pendingEnd chan OpReply
	closing    <-chan struct{} // the server's
}

type serverOp struct {
	args  OpArgs
	reply chan OpReply
}

// Ping answers, so a client can tell a live connection from a dead one.
func (s *remoteServer) Ping(int, *int) error { return nil }

func (s *remoteServer) Open(args OpenArgs, reply *OpenReply) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byName == nil {
		s.byName = map[string]int64{}
	}
	id, ok := s.byName[args.Name]
	if !ok {
		b, err := s.newBackend(args.Name)
		if err != nil {
			return err
		}
		s.next++
		id = s.next
		s.backends[id], s.byName[args.Name] = b, id
	}
	tr := s.backends[id].Traits()
	*reply = OpenReply{Session: id, Name: tr.Name, SingleWriter: tr.SingleWriter, GroupCommit: tr.GroupCommit, MaxTxOps: tr.MaxTxOps}
	return nil
}

var errRemoteRollback = errors.New("kvtest: rolled back by the client")

func (s *remoteServer) Begin(args BeginArgs, reply *int64) error {
	s.mu.Lock()
	b := s.backends[args.Session]
	if shut := s.shut; b == nil || shut {
		s.mu.Unlock()
		if shut {
			return errors.New("kvtest: the server is shutting down")
		}
		return fmt.Errorf("kvtest: no session %d", args.Session)
	}
	s.next++
	id := s.next
	t := &serverTx{ops: make(chan serverOp), cursors: map[int64]kv.Cursor{}, done: make(chan error, 1), closing: s.closing}
	s.txs[id] = t
	s.running.Add(1)
	s.mu.Unlock()
	run := b.View
	if args.Writable {
		run = b.Update
	}
	go func() {
		defer s.running.Done()
		err := run(context.Background(), func(tx kv.Tx) error { return t.serve(tx) })
		if t.pendingEnd != nil { // the outcome of the client's commit
			t.pendingEnd <- withErr(OpReply{}, err)
		}
		t.done <- err
		s.mu.Lock()
		delete(s.txs, id)
		s.mu.Unlock()
	}()
	*reply = id
	return nil
}

// serve executes the client's operations until it ends the transaction.
func (t *serverTx) serve(tx kv.Tx) error {
	if t.pendingEnd != nil {
		// The backend runs the function again: the client must too.
		t.pendingEnd <- OpReply{Restart: true}
		t.pendingEnd = nil
		clear(t.cursors)
	}
	for {
		var op serverOp
		select {
		case op = <-t.ops:
		case <-time.After(remoteIdle):
			return errRemoteAbandoned // the client went away mid-transaction
		case <-t.closing:
			return errRemoteAbandoned // the server is shutting down
		}
		if op.args.Op == "end" {
			if !op.args.Commit {
				op.reply <- OpReply{}
				return errRemoteRollback
			}
			t.pendingEnd = op.reply
			return nil
		}
		// The backend's own transaction: a kv.DB served here guards the
		// reserved names, which the client's kv.DB guards already.
		op.reply <- t.exec(keyspace.Raw(tx), op.args)
	}
}

// remoteIdle ends a transaction whose client sent nothing for this long: a
// test process that died mid-transaction must not hold the backend.
const remoteIdle = 5 * time.Second

var errRemoteAbandoned = errors.New("kvtest: transaction abandoned by its client")

// portErrors are the errors the kv port's contract names: they cross the
// wire by index, so that errors.Is holds on the client as on the server.
var portErrors = []error{kv.ErrKeyRequired, kv.ErrKeyTooLarge, kv.ErrBucketNameRequired, kv.ErrTxNotWritable, kv.ErrReservedName}

// withErr sets r's error from err.
func withErr(r OpReply, err error) OpReply {
	if err == nil {
		return r
	}
	r.Err = err.Error()
	for i, pe := range portErrors {
		if errors.Is(err, pe) {
			r.Is = i + 1
			break
		}
	}
	return r
}

// replyErr is the error r carries, or nil.
func replyErr(r OpReply) error {
	switch {
	case r.Err == "":
		return nil
	case r.Is > 0 && r.Is <= len(portErrors):
		return &portError{msg: r.Err, is: portErrors[r.Is-1]}
	}
	return errors.New(r.Err)
}

// portError is a port error received from the server: its message, and
// the error it is.
type portError struct {
	msg string
	is  error
}

func (e *portError) Error() string { return e.msg }
func (e *portError) Unwrap() error { return e.is }

func (t *serverTx) exec(tx kv.Tx, a OpArgs) OpReply {
	bucket := func() kv.Bucket {
		if a.Bucket == nil {
			return nil
		}
		return tx.Bucket(a.Bucket)
	}
	var cur kv.Cursor
	step := func(k, v []byte) OpReply {
		r := OpReply{Key: k, Value: v, Found: k != nil}
		if rc, ok := cur.(interface{ Revision() int64 }); ok && k != nil {
			r.Revision = rc.Revision()
		}
		return r
	}
	switch a.Op {
	case "writable":
		return OpReply{Found: tx.Writable()}
	case "bucket":
		return OpReply{Found: tx.Bucket(a.Bucket) != nil}
	case "create":
		_, err := tx.CreateBucketIfNotExists(a.Bucket)
		return withErr(OpReply{Found: err == nil}, err)
	case "cursor":
		var c kv.Cursor
		if a.Bucket == nil {
			c = tx.Cursor()
		} else if b := bucket(); b != nil {
			c = b.Cursor()
		} else {
			return OpReply{Err: "kvtest: no such bucket"}
		}
		t.ncur++
		t.cursors[t.ncur] = c
		return OpReply{Cursor: t.ncur}
	case "first", "last", "next", "prev", "seek":
		c := t.cursors[a.Cursor]
		if c == nil {
			return OpReply{Err: "kvtest: no such cursor"}
		}
		cur = c
		switch a.Op {
		case "first":
			return step(c.First())
		case "last":
			return step(c.Last())
		case "next":
			return step(c.Next())
		case "prev":
			return step(c.Prev())
		}
		return step(c.Seek(a.Key))
	}
	b := bucket()
	if b == nil {
		return OpReply{Err: "kvtest: no such bucket"}
	}
	switch a.Op {
	case "get":
		v := b.Get(a.Key)
		return OpReply{Value: v, Found: v != nil}
	case "put":
		return withErr(OpReply{}, b.Put(a.Key, a.Value))
	case "delete":
		return withErr(OpReply{}, b.Delete(a.Key))
	case "seq":
		n, err := b.NextSequence()
		return withErr(OpReply{Seq: n}, err)
	}
	return OpReply{Err: "kvtest: unknown operation " + a.Op}
}

func (s *remoteServer) Op(args OpArgs, reply *OpReply) error {
	s.mu.Lock()
	t := s.txs[args.Tx]
	s.mu.Unlock()
	if t == nil {
		return fmt.Errorf("kvtest: no transaction %d", args.Tx)
	}
	ch := make(chan OpReply, 1)
	select {
	case t.ops <- serverOp{args: args, reply: ch}:
	case err := <-t.done:
		t.done <- err
		return fmt.Errorf("kvtest: transaction %d ended: %v", args.Tx, err)
	}
	*reply = <-ch
	return nil
}

// remoteBackend is the client side: a kv.Backend whose transactions run on
// the server.
type remoteBackend struct {
	c       *rpc.Client
	session int64
	traits  kv.Traits
	closed  atomic.Bool

	mu   sync.Mutex
	open map[int64]bool // transactions under way, rolled back by Close
}

// openRemote opens the named database on the server in EnvRemote.
func openRemote(name string) (kv.Backend, error) {
	return RemoteBackend(os.Getenv(EnvRemote), name)
}

// RemoteBackend opens the named database on the server at addr (see
// Serve), on a connection of its own that Close closes.
func RemoteBackend(addr, name string) (kv.Backend, error) {
	c, err := rpc.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("kvtest: remote backend at %s: %w", addr, err)
	}
	var r OpenReply
	if err := c.Call("KV.Open", OpenArgs{Name: name}, &r); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &remoteBackend{c: c, session: r.Session, traits: kv.Traits{Name: r.Name, SingleWriter: r.SingleWriter, GroupCommit: r.GroupCommit, MaxTxOps: r.MaxTxOps}}, nil
}

func (b *remoteBackend) Traits() kv.Traits { return b.traits }

// Close rolls back the transactions under way (a test's "crash"; their
// functions then fail with kv.ErrClosed) and closes the connection.
func (b *remoteBackend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.mu.Lock()
	open := b.open
	b.open = nil
	b.mu.Unlock()
	for id := range open {
		var r OpReply
		_ = b.c.Call("KV.Op", OpArgs{Tx: id, Op: "end"}, &r)
	}
	return b.c.Close()
}

func (b *remoteBackend) View(ctx context.Context, fn func(kv.Tx) error) error {
	return b.run(false, fn)
}

func (b *remoteBackend) Update(ctx context.Context, fn func(kv.Tx) error) error {
	return b.run(true, fn)
}

func (b *remoteBackend) run(writable bool, fn func(kv.Tx) error) (err error) {
	if b.closed.Load() {
		return kv.ErrClosed
	}
	var id int64
	if err := b.c.Call("KV.Begin", BeginArgs{Session: b.session, Writable: writable}, &id); err != nil {
		return b.callErr(err)
	}
	b.mu.Lock()
	if b.open == nil {
		b.open = map[int64]bool{}
	}
	b.open[id] = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.open, id)
		b.mu.Unlock()
	}()
	for {
		tx := &remoteTx{b: b, id: id, writable: writable}
		ferr := func() (ferr error) {
			defer func() {
				if r := recover(); r != nil {
					_, _ = tx.op(OpArgs{Op: "end"})
					panic(r)
				}
			}()
			return fn(tx)
		}()
		if tx.err != nil {
			_, _ = tx.op(OpArgs{Op: "end"})
			return b.callErr(tx.err)
		}
		if ferr != nil {
			_, _ = tx.op(OpArgs{Op: "end"})
			return ferr
		}
		r, err := tx.op(OpArgs{Op: "end", Commit: true})
		switch {
		case err != nil:
			return b.callErr(err)
		case r.Restart:
			continue
		case r.Err != "":
			return replyErr(r)
		}
		for _, h := range tx.onCommit {
			h()
		}
		return nil
	}
}

type remoteTx struct {
	b        *remoteBackend
	id       int64
	writable bool
	onCommit []func()
	err      error // a call that failed: the transaction is void
}

// callErr reports a failed call as kv.ErrClosed once the backend is closed.
func (b *remoteBackend) callErr(err error) error {
	if b.closed.Load() || errors.Is(err, rpc.ErrShutdown) {
		return kv.ErrClosed
	}
	return err
}

func (t *remoteTx) op(a OpArgs) (OpReply, error) {
	a.Tx = t.id
	var r OpReply
	err := t.b.c.Call("KV.Op", a, &r)
	return r, err
}

// must runs an operation whose failure the port cannot report (Get, cursor
// steps): the failure voids the transaction, which then ends with it.
func (t *remoteTx) must(a OpArgs) OpReply {
	if t.err != nil {
		return OpReply{}
	}
	r, err := t.op(a)
	if err != nil {
		t.err = err
		return OpReply{}
	}
	return r
}

func remoteErr(r OpReply, err error) error {
	if err != nil {
		return err
	}
	return replyErr(r)
}

func (t *remoteTx) Bucket(name []byte) kv.Bucket {
	if !t.must(OpArgs{Op: "bucket", Bucket: name}).Found {
		return nil
	}
	return &remoteBucket{tx: t, name: append([]byte(nil), name...)}
}

func (t *remoteTx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	if err := remoteErr(t.op(OpArgs{Op: "create", Bucket: name})); err != nil {
		return nil, err
	}
	return &remoteBucket{tx: t, name: append([]byte(nil), name...)}, nil
}

func (t *remoteTx) Cursor() kv.Cursor  { return t.cursor(nil) }
func (t *remoteTx) Writable() bool     { return t.writable }
func (t *remoteTx) OnCommit(fn func()) { t.onCommit = append(t.onCommit, fn) }

func (t *remoteTx) cursor(bucket []byte) kv.Cursor {
	r := t.must(OpArgs{Op: "cursor", Bucket: bucket})
	return &remoteCursor{tx: t, id: r.Cursor}
}

type remoteBucket struct {
	tx   *remoteTx
	name []byte
}

func (b *remoteBucket) Get(key []byte) []byte {
	r := b.tx.must(OpArgs{Op: "get", Bucket: b.name, Key: key})
	if !r.Found {
		return nil
	}
	if r.Value == nil {
		return []byte{}
	}
	return r.Value
}

func (b *remoteBucket) Put(key, value []byte) error {
	return remoteErr(b.tx.op(OpArgs{Op: "put", Bucket: b.name, Key: key, Value: value}))
}

func (b *remoteBucket) Delete(key []byte) error {
	return remoteErr(b.tx.op(OpArgs{Op: "delete", Bucket: b.name, Key: key}))
}

func (b *remoteBucket) Cursor() kv.Cursor { return b.tx.cursor(b.name) }

func (b *remoteBucket) NextSequence() (uint64, error) {
	r, err := b.tx.op(OpArgs{Op: "seq", Bucket: b.name})
	return r.Seq, remoteErr(r, err)
}

type remoteCursor struct {
	tx  *remoteTx
	id  int64
	rev int64
}

// Revision passes on the server cursor's revision (0 when it has none).
func (c *remoteCursor) Revision() int64 { return c.rev }

func (c *remoteCursor) step(op string, key []byte) ([]byte, []byte) {
	r := c.tx.must(OpArgs{Op: op, Cursor: c.id, Key: key})
	c.rev = r.Revision
	if !r.Found {
		return nil, nil
	}
	if r.Key == nil {
		r.Key = []byte{}
	}
	return r.Key, r.Value
}

func (c *remoteCursor) First() ([]byte, []byte)           { return c.step("first", nil) }
func (c *remoteCursor) Last() ([]byte, []byte)            { return c.step("last", nil) }
func (c *remoteCursor) Next() ([]byte, []byte)            { return c.step("next", nil) }
func (c *remoteCursor) Prev() ([]byte, []byte)            { return c.step("prev", nil) }
func (c *remoteCursor) Seek(seek []byte) ([]byte, []byte) { return c.step("seek", seek) }
