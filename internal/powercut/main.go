//go:build linux

package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// sector is the unit a write reaches the disk in, unsynced.
const sector = 512

// disk is the filesystem's state: one lock for every call, so that a cut
// falls between two calls.
type disk struct {
	out   io.Writer // the answers
	mu    sync.Mutex
	down  bool // the power is cut: every call fails
	root  *dir
	armed *armed // a cut to make at a sync, if any
}

// armed is a cut to make at the n-th sync from now, or (fail) a failure
// of that sync alone.
type armed struct {
	n    int
	seed uint64
	out  string
	fail bool
}

// hold is how long the sync of an armed cut takes before the power goes:
// a slow disk, during which what the sync is to make durable (a commit's
// meta page) can be read.
const hold = 20 * time.Millisecond

// synced is called at every sync, under the lock: when an armed cut's
// turn has come, it lets the lock go for hold (other calls go on), cuts
// the power and fails the sync.
func (d *disk) synced() syscall.Errno {
	if d.armed == nil {
		return 0
	}
	if d.armed.n--; d.armed.n > 0 {
		return 0
	}
	a := d.armed
	d.armed = nil
	if a.fail {
		d.report("failed: a sync", nil)
		return syscall.EIO
	}
	d.mu.Unlock()
	time.Sleep(hold)
	d.mu.Lock()
	if !d.down { // else cut meanwhile, by a cut command
		msg, err := d.cutLocked(a.seed, a.out)
		d.report(msg+" at a sync", err)
	}
	return syscall.EIO
}

// report answers a cut's account, or its error.
func (d *disk) report(msg string, err error) {
	if err != nil {
		msg = "error: cut: " + err.Error()
	}
	_, _ = fmt.Fprintln(d.out, msg)
}

// file is a regular file: data as processes see it, durable as the disk
// holds it, and the sectors written since the last sync.
type file struct {
	fs.Inode
	d       *disk
	data    []byte
	durable []byte
	dirty   map[int64]bool // sector numbers
	mode    uint32
}

// dir is a directory: its children are the Inode's, and durable its names
// as of its last sync. The handlers below check a call and answer it;
// go-fuse changes the tree of names after a call that succeeded.
type dir struct {
	fs.Inode
	d       *disk
	durable map[string]*fs.Inode
	mode    uint32
}

var (
	_ fs.NodeGetattrer = (*file)(nil)
	_ fs.NodeSetattrer = (*file)(nil)
	_ fs.NodeOpener    = (*file)(nil)
	_ fs.NodeReader    = (*file)(nil)
	_ fs.NodeWriter    = (*file)(nil)
	_ fs.NodeFsyncer   = (*file)(nil)
	_ fs.NodeFlusher   = (*file)(nil)
	_ fs.NodeAllocater = (*file)(nil)

	_ fs.NodeGetattrer = (*dir)(nil)
	_ fs.NodeSetattrer = (*dir)(nil)
	_ fs.NodeLookuper  = (*dir)(nil)
	_ fs.NodeCreater   = (*dir)(nil)
	_ fs.NodeMkdirer   = (*dir)(nil)
	_ fs.NodeUnlinker  = (*dir)(nil)
	_ fs.NodeRmdirer   = (*dir)(nil)
	_ fs.NodeRenamer   = (*dir)(nil)
	_ fs.NodeLinker    = (*dir)(nil)
	_ fs.NodeFsyncer   = (*dir)(nil)
	_ fs.NodeStatfser  = (*dir)(nil)
)

// lock takes the disk's lock, or fails with EIO when the power is cut.
func (d *disk) lock() syscall.Errno {
	d.mu.Lock()
	if d.down {
		d.mu.Unlock()
		return syscall.EIO
	}
	return 0
}

func (f *file) attr(out *fuse.Attr) {
	out.Mode = syscall.S_IFREG | f.mode
	out.Size = uint64(len(f.data))
	out.Blocks = (out.Size + 511) / 512
	out.Nlink = 1
}

func (f *file) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if e := f.d.lock(); e != 0 {
		return e
	}
	defer f.d.mu.Unlock()
	f.attr(&out.Attr)
	return 0
}

func (f *file) Setattr(_ context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := f.d.lock(); e != 0 {
		return e
	}
	defer f.d.mu.Unlock()
	if size, ok := in.GetSize(); ok {
		f.resize(int64(size))
	}
	if mode, ok := in.GetMode(); ok {
		f.mode = mode & 0o7777
	}
	f.attr(&out.Attr)
	return 0
}

// resize sets the file's size as processes see it; the disk's changes at
// the next sync.
func (f *file) resize(size int64) {
	if size <= int64(len(f.data)) {
		f.data = f.data[:size]
		return
	}
	f.data = append(f.data, make([]byte, size-int64(len(f.data)))...)
}

func (f *file) Open(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if e := f.d.lock(); e != 0 {
		return nil, 0, e
	}
	f.d.mu.Unlock()
	return nil, 0, 0
}

func (f *file) Read(_ context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if e := f.d.lock(); e != 0 {
		return nil, e
	}
	defer f.d.mu.Unlock()
	if off >= int64(len(f.data)) {
		return fuse.ReadResultData(nil), 0
	}
	n := copy(dest, f.data[off:])
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *file) Write(_ context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if e := f.d.lock(); e != 0 {
		return 0, e
	}
	defer f.d.mu.Unlock()
	if end := off + int64(len(data)); end > int64(len(f.data)) {
		f.resize(end)
	}
	copy(f.data[off:], data)
	for s := off / sector; s*sector < off+int64(len(data)); s++ {
		f.dirty[s] = true
	}
	return uint32(len(data)), 0
}

func (f *file) Allocate(_ context.Context, _ fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	if e := f.d.lock(); e != 0 {
		return e
	}
	defer f.d.mu.Unlock()
	if mode&0x01 == 0 { // not FALLOC_FL_KEEP_SIZE
		if end := int64(off + size); end > int64(len(f.data)) {
			f.resize(end)
		}
	}
	return 0
}

// Fsync makes the file's data and size durable (fsync and fdatasync
// alike).
func (f *file) Fsync(context.Context, fs.FileHandle, uint32) syscall.Errno {
	if e := f.d.lock(); e != 0 {
		return e
	}
	defer f.d.mu.Unlock()
	if e := f.d.synced(); e != 0 {
		return e
	}
	f.durable = slices.Clone(f.data)
	clear(f.dirty)
	return 0
}

func (f *file) Flush(context.Context, fs.FileHandle) syscall.Errno {
	if e := f.d.lock(); e != 0 {
		return e
	}
	f.d.mu.Unlock()
	return 0
}

func (n *dir) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if e := n.d.lock(); e != 0 {
		return e
	}
	defer n.d.mu.Unlock()
	out.Mode = syscall.S_IFDIR | n.mode
	out.Nlink = 2
	return 0
}

func (n *dir) Setattr(_ context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.d.lock(); e != 0 {
		return e
	}
	defer n.d.mu.Unlock()
	if mode, ok := in.GetMode(); ok {
		n.mode = mode & 0o7777
	}
	out.Mode = syscall.S_IFDIR | n.mode
	return 0
}

func (n *dir) Statfs(_ context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize, out.Frsize = 4096, 4096
	out.Blocks, out.Bfree, out.Bavail = 1<<20, 1<<20, 1<<20
	out.NameLen = 255
	return 0
}

func (n *dir) Lookup(_ context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.d.lock(); e != 0 {
		return nil, e
	}
	defer n.d.mu.Unlock()
	ch := n.GetChild(name)
	if ch == nil {
		return nil, syscall.ENOENT
	}
	switch c := ch.Operations().(type) {
	case *file:
		c.attr(&out.Attr)
	case *dir:
		out.Mode = syscall.S_IFDIR | c.mode
	}
	return ch, 0
}

func (n *dir) Create(ctx context.Context, name string, _, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := n.d.lock(); e != 0 {
		return nil, nil, 0, e
	}
	defer n.d.mu.Unlock()
	if n.GetChild(name) != nil {
		return nil, nil, 0, syscall.EEXIST
	}
	f := &file{d: n.d, dirty: map[int64]bool{}, mode: mode & 0o7777}
	ch := n.NewInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}) // named by go-fuse once this returns
	f.attr(&out.Attr)
	return ch, nil, 0, 0
}

func (n *dir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.d.lock(); e != 0 {
		return nil, e
	}
	defer n.d.mu.Unlock()
	if n.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	c := &dir{d: n.d, durable: map[string]*fs.Inode{}, mode: mode & 0o7777}
	ch := n.NewInode(ctx, c, fs.StableAttr{Mode: syscall.S_IFDIR}) // named by go-fuse once this returns
	out.Mode = syscall.S_IFDIR | c.mode
	return ch, 0
}

func (n *dir) Unlink(_ context.Context, name string) syscall.Errno {
	if e := n.d.lock(); e != 0 {
		return e
	}
	defer n.d.mu.Unlock()
	if n.GetChild(name) == nil {
		return syscall.ENOENT
	}
	return 0 // go-fuse removes the name once this returns
}

func (n *dir) Rmdir(ctx context.Context, name string) syscall.Errno {
	if e := n.d.lock(); e != 0 {
		return e
	}
	defer n.d.mu.Unlock()
	ch := n.GetChild(name)
	if ch == nil {
		return syscall.ENOENT
	}
	if len(ch.Children()) > 0 {
		return syscall.ENOTEMPTY
	}
	return 0 // go-fuse removes the name once this returns
}

func (n *dir) Rename(_ context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if e := n.d.lock(); e != 0 {
		return e
	}
	defer n.d.mu.Unlock()
	if flags != 0 {
		return syscall.ENOTSUP // RENAME_NOREPLACE and RENAME_EXCHANGE: not used by oncekv
	}
	if n.GetChild(name) == nil {
		return syscall.ENOENT
	}
	return 0 // go-fuse moves the name once this returns (a move here too would remove it)
}

func (n *dir) Link(_ context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.d.lock(); e != 0 {
		return nil, e
	}
	defer n.d.mu.Unlock()
	if n.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	f, ok := target.(*file)
	if !ok {
		return nil, syscall.EPERM // a directory
	}
	f.attr(&out.Attr)
	return target.EmbeddedInode(), 0 // named by go-fuse once this returns
}

// Fsync makes the directory's names durable.
func (n *dir) Fsync(context.Context, fs.FileHandle, uint32) syscall.Errno {
	if e := n.d.lock(); e != 0 {
		return e
	}
	defer n.d.mu.Unlock()
	if e := n.d.synced(); e != 0 {
		return e
	}
	n.durable = n.Children()
	return 0
}

// cut cuts the power and writes what the disk holds under out.
func (d *disk) cut(seed uint64, out string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return "cut: already", nil
	}
	d.armed = nil
	return d.cutLocked(seed, out)
}

// cutLocked is cut, under the lock.
func (d *disk) cutLocked(seed uint64, out string) (string, error) {
	d.down = true
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) //nolint:gosec // which sectors a cut keeps: seeded, to replay a run
	keep := []float64{0, 0.5, 1}[rng.IntN(3)]
	var files, kept, pending int
	var write func(n *dir, path string) error
	write = func(n *dir, path string) error {
		if err := os.MkdirAll(path, 0o700); err != nil {
			return err
		}
		names := make([]string, 0, len(n.durable))
		for name := range n.durable {
			names = append(names, name)
		}
		slices.Sort(names) // the draws in a fixed order: one seed, one image
		for _, name := range names {
			switch c := n.durable[name].Operations().(type) {
			case *dir:
				if err := write(c, filepath.Join(path, name)); err != nil {
					return err
				}
			case *file:
				img := slices.Clone(c.durable)
				sectors := make([]int64, 0, len(c.dirty))
				for s := range c.dirty {
					sectors = append(sectors, s)
				}
				slices.Sort(sectors)
				for _, s := range sectors {
					pending++
					if rng.Float64() >= keep || s*sector >= int64(len(c.data)) {
						continue
					}
					kept++
					end := min((s+1)*sector, int64(len(c.data)))
					if end > int64(len(img)) {
						img = append(img, make([]byte, end-int64(len(img)))...)
					}
					copy(img[s*sector:end], c.data[s*sector:end])
				}
				files++
				if err := os.WriteFile(filepath.Join(path, name), img, 0o600); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := write(d.root, out); err != nil {
		return "", err
	}
	return fmt.Sprintf("cut: %d files, %d of %d unsynced sectors kept (p=%.1f)", files, kept, pending, keep), nil
}

// load adds the files under from to n, durable.
func (d *disk) load(ctx context.Context, n *dir, from string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		path := filepath.Join(from, e.Name())
		if e.IsDir() {
			c := &dir{d: d, durable: map[string]*fs.Inode{}, mode: 0o700}
			ch := n.NewPersistentInode(ctx, c, fs.StableAttr{Mode: syscall.S_IFDIR})
			n.AddChild(e.Name(), ch, false)
			if err := d.load(ctx, c, path); err != nil {
				return err
			}
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f := &file{d: d, data: data, durable: slices.Clone(data), dirty: map[int64]bool{}, mode: 0o600}
		n.AddChild(e.Name(), n.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
	n.durable = n.Children()
	return nil
}

func main() {
	mount := flag.String("mount", "", "the directory to mount the filesystem on")
	from := flag.String("from", "", "a directory whose files are the filesystem's first content")
	flag.Parse()
	if *mount == "" {
		fmt.Fprintln(os.Stderr, "usage: powercut -mount DIR [-from DIR]")
		os.Exit(2)
	}
	if err := run(*mount, *from, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "powercut:", err)
		os.Exit(1)
	}
}

// run mounts the filesystem on mount and serves the commands of in,
// answering on out, until "exit" or the end of in.
func run(mount, from string, in io.Reader, out io.Writer) error {
	d := &disk{out: out}
	root := &dir{d: d, durable: map[string]*fs.Inode{}, mode: 0o700}
	d.root = root
	var zero time.Duration
	srv, err := fs.Mount(mount, root, &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero, // every look-up asks: nothing goes stale after a cut
		MountOptions: fuse.MountOptions{DirectMount: true, DirectMountStrict: true, FsName: "powercut", Name: "powercut"},
		OnAdd: func(ctx context.Context) {
			if from != "" {
				if err := d.load(ctx, root, from); err != nil {
					fmt.Fprintln(os.Stderr, "powercut: load:", err)
					os.Exit(1)
				}
			}
		},
	})
	if err != nil {
		return fmt.Errorf("mount %s: %w", mount, err)
	}
	defer unmount(srv, mount)
	_, _ = fmt.Fprintln(out, "ready")
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		switch {
		case len(f) == 3 && f[0] == "cut":
			seed, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return fmt.Errorf("cut: seed %q: %w", f[1], err)
			}
			d.report(d.cut(seed, f[2]))
		case len(f) == 4 && f[0] == "cutat":
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 1 {
				return fmt.Errorf("cutat: sync number %q", f[1])
			}
			seed, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				return fmt.Errorf("cutat: seed %q: %w", f[2], err)
			}
			d.mu.Lock()
			if !d.down {
				d.armed = &armed{n: n, seed: seed, out: f[3]}
			}
			d.mu.Unlock()
		case len(f) == 2 && f[0] == "failat":
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 1 {
				return fmt.Errorf("failat: sync number %q", f[1])
			}
			d.mu.Lock()
			answer := "failat: the power is cut"
			if !d.down {
				d.armed, answer = &armed{n: n, fail: true}, "armed"
			}
			d.mu.Unlock()
			_, _ = fmt.Fprintln(out, answer)
		case len(f) == 1 && f[0] == "exit":
			return nil
		default:
			return fmt.Errorf("unknown command %q", lines.Text())
		}
	}
	return lines.Err()
}

// unmount unmounts the filesystem, detaching it if a process still holds
// a file open (a workload killed after the cut may not be reaped yet).
func unmount(srv *fuse.Server, mount string) {
	if err := srv.Unmount(); err != nil {
		_ = syscall.Unmount(mount, syscall.MNT_DETACH)
	}
	srv.Wait()
}
