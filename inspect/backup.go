package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/oncekv/oncekv/internal/atomicfile"
	"github.com/oncekv/oncekv/kv"
)

// backupHandler serves GET /backup (see Handler).
type backupHandler struct {
	db      *kv.DB
	opts    HandlerOptions
	running sync.Mutex // one backup at a time: each takes a file's worth of disk
}

func (h *backupHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.opts.Token == "" || !hasToken(r, h.opts.Token) {
		writeJSON(w, errStatus(errForbidden, h.opts.Token != ""), map[string]string{"error": errForbidden.Error()})
		return
	}
	h.serve(w, r)
}

// serve sends the copy to a caller already found to hold the token.
func (h *backupHandler) serve(w http.ResponseWriter, r *http.Request) {
	if h.db.Bolt() == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": kv.ErrBackupUnsupported.Error()})
		return
	}
	if r.Method == http.MethodHead {
		// What a GET would send, without making the copy: its headers,
		// and the file's size as of now.
		// Read in kv's View: a page the disk cannot read is then the
		// database's refusal, not the end of the process.
		var size int64
		if err := h.db.View(r.Context(), func(tx kv.Tx) error { size = kv.BoltTx(tx).Size(); return nil }); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": fmt.Sprintf("inspect: backup: %v", err)})
			return
		}
		h.headers(w, size)
		w.WriteHeader(http.StatusOK)
		return
	}
	if !h.running.TryLock() {
		writeJSON(w, http.StatusConflict, map[string]string{"error": "inspect: a backup is under way; ask again when it has been sent"})
		return
	}
	defer h.running.Unlock()
	dir := h.opts.BackupDir
	if dir == "" {
		dir = filepath.Dir(h.db.Path())
	}
	f, err := atomicfile.Temp(dir, "backup")
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": fmt.Sprintf("inspect: backup: %v", err)})
		return
	}
	// Unlinked at once where the system allows it (the open file stays
	// readable), so that a crash mid-copy leaves nothing behind; elsewhere
	// (Windows) once closed.
	removed := os.Remove(f.Name()) == nil
	defer func() {
		_ = f.Close()
		if !removed {
			_ = os.Remove(f.Name())
		}
	}()
	n, err := h.db.Backup(r.Context(), atomicfile.Paced(f))
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	h.headers(w, n)
	w.WriteHeader(http.StatusOK)
	_, _ = io.CopyN(w, f, n) // a client gone mid-way sees a short body against Content-Length
}

// headers sets a copy's response headers, for a copy of size bytes.
func (h *backupHandler) headers(w http.ResponseWriter, size int64) {
	name := strings.TrimSuffix(filepath.Base(h.db.Path()), filepath.Ext(h.db.Path())) + ".backup.db"
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.FormatInt(size, 10))
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	hd.Set("Cache-Control", "no-store")
}
