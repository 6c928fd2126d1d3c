package kvtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Power-loss tests run a service on the powercut program's filesystem
// (the module github.com/oncekv/oncekv/internal/powercut, Linux): files
// kept in memory twice, as processes see them and as the disk holds them.
// A file's data reaches the disk when the file is synced, a name when its
// directory is; a cut writes what the disk held to a real directory, with
// none, some or all of the writes not yet synced. SIGKILL cannot test
// that: a killed process leaves its writes in the page cache, which the
// disk gets anyway.
//
//	go build -o /tmp/powercut ./internal/powercut
//	ONCEKV_POWERCUT=/tmp/powercut go test -run PowerLoss ./...
const (
	// EnvPowercut names the powercut program (PowercutProgram).
	EnvPowercut = "ONCEKV_POWERCUT"
	// EnvRequirePowercut, when set, makes a power-loss test that cannot
	// run fail instead of skipping (CI, where it must run).
	EnvRequirePowercut = "ONCEKV_REQUIRE_POWERCUT"
)

// PowercutProgram returns the powercut program's path ($ONCEKV_POWERCUT),
// and skips t where a power-loss test cannot run: the variable unset, not
// root (powercut mounts by itself, without fusermount), no /dev/fuse, or
// a remote backend (ONCEKV_TEST_REMOTE: the cut is a bbolt file's). With
// ONCEKV_REQUIRE_POWERCUT set, it fails t instead of skipping, except on
// a remote backend.
func PowercutProgram(t testing.TB) string {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		if os.Getenv(EnvRequirePowercut) != "" {
			t.Fatal(why + " (" + EnvRequirePowercut + " is set)")
		}
		t.Skip(why)
	}
	if Remote() {
		t.Skip("powercut: a bbolt file's power cut; this run's backend is remote")
	}
	bin := os.Getenv(EnvPowercut)
	switch {
	case bin == "":
		skip("powercut: " + EnvPowercut + " is not set (go build -o /tmp/powercut ./internal/powercut && " + EnvPowercut + "=/tmp/powercut; .ci/run does it)")
	case os.Geteuid() != 0:
		skip("powercut: mounting a FUSE filesystem needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		skip("powercut: no /dev/fuse: " + err.Error())
	}
	return bin
}

// PowerDisk is a running powercut: a filesystem mounted on a directory,
// whose power a test cuts with CutWhile.
type PowerDisk struct {
	t     testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// MountPowerDisk mounts powercut's filesystem (bin, from PowercutProgram)
// on mnt, loaded with the files of the directory from as its durable
// content, and waits until it is ready. Its standard error goes to t's
// log. An unmounted disk is unmounted when the test ends.
func MountPowerDisk(t testing.TB, bin, mnt, from string) *PowerDisk {
	t.Helper()
	cmd := exec.Command(bin, "-mount", mnt, "-from", from) //nolint:gosec // the program ONCEKV_POWERCUT names, for a test
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatalf("powercut: %v", err)
	}
	d := &PowerDisk{t: t, cmd: cmd, in: in, lines: make(chan string, 4)}
	go func() {
		defer close(d.lines)
		for s := bufio.NewScanner(stdout); s.Scan(); {
			d.lines <- s.Text()
		}
	}()
	t.Cleanup(func() { // an unfinished test: the end of the input unmounts
		_ = in.Close()
		_ = cmd.Wait()
	})
	if line, err := d.next(); err != nil || line != "ready" {
		t.Fatalf("powercut did not mount %s: %q %v", mnt, line, err)
	}
	return d
}

// A Cut says where and how the power goes.
type Cut struct {
	// Image is the directory (on a real disk, not there yet) that the
	// disk's content is written to.
	Image string
	// Seed draws which of the writes not yet synced the disk kept: each
	// 512-byte sector with a probability of 0, ½ or 1.
	Seed uint64
	// AtSync, when positive, cuts the power at the AtSync-th sync from
	// now (a file's or a directory's), which is held 20 ms and then
	// fails: the moment a commit's pages are written and not synced, or
	// its meta page.
	AtSync int
	// After, when AtSync is 0, cuts the power that long from now.
	After time.Duration
}

// PlanCut draws where cycle c of a power-loss test cuts the power, to
// image with a seed from rng: at a sync from 1 to maxSync in even cycles,
// after up to maxAfter in odd ones.
func PlanCut(c int, rng *rand.Rand, image string, maxSync int, maxAfter time.Duration) Cut {
	cut := Cut{Image: image, Seed: rng.Uint64()}
	if c%2 == 0 {
		cut.AtSync = 1 + rng.IntN(maxSync)
	} else {
		cut.After = time.Duration(rng.Int64N(int64(maxAfter)))
	}
	return cut
}

// CutWhile cuts the power while something runs, as cut says, or as soon
// as ended is closed (the run is over first). It returns powercut's
// account of the cut ("cut: N files, K of M unsynced sectors kept", and
// " at a sync" for a cut at a sync), and whether the cut came after the
// end. It does not fail the test, so any goroutine may call it.
func (d *PowerDisk) CutWhile(cut Cut, ended <-chan struct{}) (account string, afterEnd bool, err error) {
	where := fmt.Sprintf("%d %s", cut.Seed, cut.Image)
	var timer <-chan time.Time // nil at a sync
	if cut.AtSync > 0 {
		d.send(fmt.Sprintf("cutat %d %s", cut.AtSync, where))
	} else {
		timer = time.After(cut.After)
	}
	select {
	case line, ok := <-d.lines: // the cut at a sync
		if !ok {
			return "", false, errors.New("powercut ended")
		}
		account = line
	case <-timer:
	case <-ended:
		afterEnd = true
	}
	if account == "" {
		d.send("cut " + where)
		if account, err = d.next(); err != nil {
			return "", false, err
		}
	}
	// A cut at a sync made as the run ended answers first (and says "at a
	// sync"): the "already" of the cut asked for after it follows, unread.
	afterEnd = afterEnd && !strings.HasSuffix(account, " at a sync")
	if !strings.HasPrefix(account, "cut: ") || account == "cut: already" {
		return "", false, fmt.Errorf("powercut: %s", account)
	}
	return account, afterEnd, nil
}

// FailSync makes the n-th sync from now fail with EIO, and make nothing
// durable, without cutting the power: a disk that failed a write-back.
// When that sync is a commit's meta page's, kv refuses every call from
// then on (kv.ErrSyncFailed). SyncFailed waits for it.
func (d *PowerDisk) FailSync(n int) error {
	d.send(fmt.Sprintf("failat %d", n))
	line, err := d.next()
	if err == nil && line != "armed" {
		err = fmt.Errorf("powercut: %s", line)
	}
	return err
}

// SyncFailed waits until the sync FailSync chose has failed.
func (d *PowerDisk) SyncFailed() error {
	line, err := d.next()
	if err == nil && line != "failed: a sync" {
		err = fmt.Errorf("powercut: %s", line)
	}
	return err
}

// Unmount unmounts the disk and waits for powercut to end; after a cut,
// once nothing has the mounted files open.
func (d *PowerDisk) Unmount() {
	d.t.Helper()
	d.send("exit")
	if err := d.cmd.Wait(); err != nil {
		d.t.Fatalf("powercut: %v", err)
	}
}

// send sends powercut a command.
func (d *PowerDisk) send(cmd string) {
	_, _ = fmt.Fprintln(d.in, cmd) // a powercut that ended is reported by next
}

// next returns powercut's next answer.
func (d *PowerDisk) next() (string, error) {
	select {
	case line, ok := <-d.lines:
		if !ok {
			return "", errors.New("powercut ended")
		}
		return line, nil
	case <-time.After(time.Minute):
		return "", errors.New("powercut did not answer within a minute")
	}
}

// logWriter writes to a test's log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
