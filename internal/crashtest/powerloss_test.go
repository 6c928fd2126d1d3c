package crashtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/atomicfile"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// TestPowerLoss cuts the power under the workload, which SIGKILL cannot
// do: a killed process leaves its writes in the page cache, which the disk
// gets anyway, while a power cut loses every write not yet synced. The
// workload runs durably on powercut's filesystem (internal/powercut: a
// file's data reaches the disk when the file is synced, a name when its
// directory is), which is cut at a random moment. The cut writes what the
// disk held to a real directory (with none, some or all of the unsynced
// sectors kept, in any order), the workload restarts there with the same
// client keys, and the next cycle mounts the result again. At the end,
// against the acknowledged operations: lost = duplicated = unexpected = 0.
//
// It needs the powercut program (ONCEKV_POWERCUT; .ci/run builds it),
// /dev/fuse and root, and skips without them unless
// ONCEKV_REQUIRE_POWERCUT is set.
func TestPowerLoss(t *testing.T) {
	bin := kvtest.PowercutProgram(t)
	h := newHarness(t)
	state := filepath.Join(h.dir, "state-0")
	require.NoError(t, os.Mkdir(state, 0o700))
	h.db = filepath.Join(state, "service.db")
	rng := rand.New(rand.NewPCG(5, 6))
	n := 3 * cycles()
	start := time.Now()
	var cuts []string
	for c := 1; c <= n; c++ {
		cuts = append(cuts, h.powerCycle(bin, c, rng))
	}
	require.False(t, h.run("", [2]int{0, 0}, true, 0))
	h.check("drain")
	lost, duplicated, unexpected := h.verify()
	during, torn, acked := 0, 0, 0
	for _, c := range cuts {
		var files, kept, pending int
		if _, err := fmt.Sscanf(c, "cut: %d files, %d of %d unsynced", &files, &kept, &pending); err == nil && pending > 0 {
			torn++
		}
		if !strings.Contains(c, "after the run") {
			during++
		}
		if strings.Contains(c, " of 8 operations acknowledged") && !strings.Contains(c, " 0 of 8 operations") {
			acked++
		}
	}
	t.Logf("%d power cuts: %d while the workload ran, %d with writes not yet synced (kept with a probability of 0, ½ or 1), %d after some of their range was acknowledged; %d processes, %d operations, %s",
		n, during, torn, acked, h.runs, h.next, time.Since(start).Round(time.Second))
	t.Logf("lost=%d duplicated=%d unexpected=%d", lost, duplicated, unexpected)
	require.Zero(t, lost, "lost")
	require.Zero(t, duplicated, "duplicated")
	require.Zero(t, unexpected, "unexpected")
	require.GreaterOrEqual(t, during, n/2, "too few cuts fell while the workload ran: %v", cuts)
	require.Positive(t, torn, "no cut fell with writes unsynced: %v", cuts)
}

// powerCycle runs a fresh range on powercut's filesystem, loaded with the
// current state, and cuts the power: at a random moment, or (every other
// cycle) at a random sync, a commit's pages or its meta page written and
// not yet synced; after the run, if it ends first. The state becomes what
// the cut left, which is checked; the workload then restarts on it and
// finishes the range. It returns powercut's account of the cut.
func (h *harness) powerCycle(bin string, c int, rng *rand.Rand) string {
	h.t.Helper()
	r := [2]int{h.next, h.next + 8}
	h.next += 8
	h.ranges = append(h.ranges, r)
	mnt := h.t.TempDir()
	pc := kvtest.MountPowerDisk(h.t, bin, mnt, filepath.Dir(h.db))
	out := filepath.Join(h.dir, fmt.Sprintf("state-%d", c))
	cut := kvtest.PlanCut(c, rng, out, 250, 150*time.Millisecond)
	var account string
	var afterRun bool
	var err error
	h.runOn(filepath.Join(mnt, "service.db"), "", r, false, func(p *os.Process, exited <-chan struct{}) bool {
		account, afterRun, err = pc.CutWhile(cut, exited) // on runOn's goroutine: no FailNow here
		if !afterRun {
			_ = p.Signal(syscall.SIGKILL)
		}
		return !afterRun
	})
	require.NoError(h.t, err)
	if afterRun {
		account += " after the run"
	}
	require.True(h.t, strings.HasPrefix(account, "cut: "), "powercut: %s", account)
	h.crashes["power"]++
	pc.Unmount()
	h.db = filepath.Join(out, "service.db")
	account += fmt.Sprintf(", %d of %d operations acknowledged before it", h.acknowledgedHeld(r, account), r[1]-r[0]) // before check, whose open would make a missing file
	h.check("power cut " + account)
	require.False(h.t, h.run("", r, false, 0), "the restart must finish its range")
	h.check("restart after power cut " + account)
	return account
}

// acknowledgedHeld checks, before anything runs on what the cut left,
// that it holds every operation of range r acknowledged before the cut:
// the restart would otherwise do a lost operation again, and the end state
// would not show the loss. It returns how many there were.
func (h *harness) acknowledgedHeld(r [2]int, cut string) (acked int) {
	h.t.Helper()
	acks, err := readAcks(h.acklog)
	require.NoError(h.t, err)
	for i := r[0]; i < r[1]; i++ {
		if acks[i] {
			acked++
		}
	}
	db, err := kv.Open(h.db, &kv.Options{ReadOnly: true})
	if errors.Is(err, fs.ErrNotExist) {
		require.Zero(h.t, acked, "operations were acknowledged, and the power cut left no database (%s)", cut)
		return 0
	}
	require.NoError(h.t, err)
	defer func() { require.NoError(h.t, db.Close()) }()
	require.NoError(h.t, db.View(context.Background(), func(tx kv.Tx) error {
		get := func(b []byte, k string) string {
			if bk := tx.Bucket(b); bk != nil {
				return string(bk.Get([]byte(k)))
			}
			return ""
		}
		for i := r[0]; i < r[1]; i++ {
			if !acks[i] {
				continue
			}
			order := fmt.Sprintf("order-%d", i)
			require.True(h.t, strings.HasPrefix(get(ordersB, order), "paid:"), "acknowledged %s is %q after the power cut (%s)", order, get(ordersB, order), cut)
			for _, c := range []struct {
				bucket []byte
				key    string
			}{{createdB, order}, {shippedB, order}, {appliedB, fmt.Sprintf("msg-%d", i)}} {
				require.Equal(h.t, "1", get(c.bucket, c.key), "acknowledged operation %d: %s %s after the power cut (%s)", i, c.bucket, c.key, cut)
			}
		}
		return nil
	}))
	return acked
}

// testWriter writes to a test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// A backup written to a disk whose power is cut (kv.DB.BackupFile, and
// `oncekv backup --out`, through atomicfile.Create) is there whole or not
// at all, and there whole if BackupFile returned before the cut: the copy
// is synced before its name is linked, and the name synced before it
// returns.
func TestBackupFileUnderPowerLoss(t *testing.T) {
	bin := kvtest.PowercutProgram(t)
	src := ordersDB(t, filepath.Join(t.TempDir(), "src.db"), "v1", 3000)
	rng := rand.New(rand.NewPCG(7, 8))
	outcomes := map[string]int{}
	for c := 0; c < 3*cycles(); c++ {
		outcomes[cutDuring(t, bin, t.TempDir(), c, rng, func(mnt string) error {
			_, err := src.BackupFile(context.Background(), filepath.Join(mnt, "backup.db"))
			return err
		}, func(image string, finished bool) string {
			v, n := ordersIn(t, filepath.Join(image, "backup.db"))
			if n == 0 {
				require.False(t, finished, "BackupFile returned before the cut, and the backup is gone")
				return "no backup"
			}
			require.Equal(t, [2]any{"v1", 3000}, [2]any{v, n}, "a backup the cut left")
			return "the whole backup"
		})]++
	}
	t.Logf("after %d cuts: %v", 3*cycles(), outcomes)
	require.Positive(t, outcomes["the whole backup"])
}

// A file replaced while the power is cut (`oncekv restore`, through
// atomicfile.Replace) is the old one or the new one, whole, and the new
// one if Replace returned before the cut.
func TestReplaceUnderPowerLoss(t *testing.T) {
	bin := kvtest.PowercutProgram(t)
	dir := t.TempDir()
	ordersDB(t, filepath.Join(dir, "old", "target.db"), "old", 1000)
	require.NoError(t, ordersDB(t, filepath.Join(dir, "new.db"), "new", 2000).Close())
	newer, err := os.ReadFile(filepath.Join(dir, "new.db"))
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(9, 10))
	outcomes := map[string]int{}
	for c := 0; c < 3*cycles(); c++ {
		outcomes[cutDuring(t, bin, filepath.Join(dir, "old"), c, rng, func(mnt string) error {
			_, err := atomicfile.Replace(filepath.Join(mnt, "target.db"), func(f *os.File) (int64, error) {
				n, err := f.Write(newer)
				return int64(n), err
			})
			return err
		}, func(image string, finished bool) string {
			v, n := ordersIn(t, filepath.Join(image, "target.db"))
			switch {
			case v == "old" && n == 1000:
				require.False(t, finished, "Replace returned before the cut, and the old file is back")
				return "the old file"
			case v == "new" && n == 2000:
				return "the new file"
			}
			entries, _ := os.ReadDir(image)
			t.Fatalf("the cut left a file with %d orders %q: neither the old (1000) nor the new (2000); %v", n, v, entries)
			return ""
		})]++
	}
	t.Logf("after %d cuts: %v", 3*cycles(), outcomes)
	require.Positive(t, outcomes["the new file"])
	require.Positive(t, outcomes["the old file"])
}

// cutDuring mounts powercut's filesystem with the files of from, runs
// write on it (in this process: it reads nothing through a memory map
// there), and cuts the power at a random moment, at a random sync, or
// when write has returned. It returns what check, given the directory
// the cut left and whether write had returned (nil) before it, says of
// it.
func cutDuring(t *testing.T, bin, from string, c int, rng *rand.Rand, write func(mnt string) error, check func(image string, finished bool) string) string {
	t.Helper()
	mnt := t.TempDir()
	pc := kvtest.MountPowerDisk(t, bin, mnt, from)
	image := filepath.Join(t.TempDir(), "image")
	cut := kvtest.PlanCut(c, rng, image, 4, 20*time.Millisecond)
	ended := make(chan struct{})
	var werr error
	go func() { werr = write(mnt); close(ended) }()
	_, finished, err := pc.CutWhile(cut, ended)
	require.NoError(t, err)
	<-ended // failed with the power, or returned before
	if finished {
		require.NoError(t, werr, "with the power on")
	}
	pc.Unmount()
	return check(image, finished)
}

// ordersDB writes n orders whose value is v to a new database at path,
// and returns it open.
func ordersDB(t *testing.T, path, v string, n int) *kv.DB {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Update(context.Background(), func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(ordersB)
		if err != nil {
			return err
		}
		for i := range n {
			if err := b.Put(fmt.Appendf(nil, "order-%06d", i), []byte(v+strings.Repeat(".", 200))); err != nil {
				return err
			}
		}
		return nil
	}))
	return db
}

// ordersIn opens the database at path as a reader would and returns its
// orders' value and their count (0 when there is no file), after a check.
func ordersIn(t *testing.T, path string) (string, int) {
	t.Helper()
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return "", 0
	}
	db, err := kv.Open(path, &kv.Options{ReadOnly: true})
	require.NoError(t, err, "the cut left a file that does not open")
	defer func() { require.NoError(t, db.Close()) }()
	problems, err := db.Check(context.Background())
	require.NoError(t, err)
	require.Empty(t, problems)
	var v string
	n := 0
	require.NoError(t, db.View(context.Background(), func(tx kv.Tx) error {
		v, n = "", 0 // the rerun build runs this twice
		b := tx.Bucket(ordersB)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, val := c.First(); k != nil; k, val = c.Next() {
			v, _, _ = strings.Cut(string(val), ".")
			n++
		}
		return nil
	}))
	return v, n
}
