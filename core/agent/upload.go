package agent

// Upload area: files an agent may hand to a file input.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/runtime"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/snapshot"
)

// Upload area limits: one file, and how many files a session holds.
const (
	MaxUploadBytes = 64 << 20
	MaxUploadFiles = 64
)

// Upload is a file in a session's upload area.
type Upload struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// CheckUploadName accepts a plain file name for the upload area: no path
// (no "/", "\", ".."), not hidden, no control characters, at most 255
// bytes. Anything else is invalid_argument.
func CheckUploadName(name string) error {
	bad := name == "" || len(name) > 255 || !utf8.ValidString(name) || strings.HasPrefix(name, ".") ||
		strings.ContainsAny(name, `/\`) || filepath.IsAbs(name) || name != filepath.Base(name) || strings.Contains(name, "..")
	for _, c := range name {
		bad = bad || unicode.IsControl(c)
	}
	if bad {
		return errorf(errcode.InvalidArgument, false, "a plain file name such as report.pdf: no path, no \"..\", not starting with \".\"", "bad upload file name")
	}
	return nil
}

// ListUploads lists the files in the session's upload area.
func ListUploads(s *session.Session) ([]Upload, error) {
	dir, err := s.UploadDir()
	if err != nil {
		return nil, errorf(errcode.NotReady, false, "", "the session has no upload area (it ended)")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("agent: list uploads: %w", err)
	}
	out := []Upload{}
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if fi, err := e.Info(); err == nil {
			out = append(out, Upload{Name: e.Name(), Size: fi.Size(), Modified: fi.ModTime().UTC()})
		}
	}
	return out, nil
}

// SaveUpload stores r as name in the session's upload area (replacing a
// file of that name), at most MaxUploadBytes; the area holds at most
// MaxUploadFiles files. The file appears whole or not at all.
func SaveUpload(s *session.Session, name string, r io.Reader) (Upload, error) {
	if err := CheckUploadName(name); err != nil {
		return Upload{}, err
	}
	list, err := ListUploads(s)
	if err != nil {
		return Upload{}, err
	}
	if len(list) >= MaxUploadFiles {
		exists := false
		for _, u := range list {
			exists = exists || u.Name == name
		}
		if !exists {
			return Upload{}, errorf(errcode.TooLarge, true, "", "the upload area holds at most %d files", MaxUploadFiles)
		}
	}
	dir, err := s.UploadDir()
	if err != nil {
		return Upload{}, errorf(errcode.NotReady, false, "", "the session has no upload area (it ended)")
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Upload{}, fmt.Errorf("agent: upload area: %w", err)
	}
	defer root.Close()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".part-" + hex.EncodeToString(rnd[:])
	f, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return Upload{}, fmt.Errorf("agent: upload: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(r, MaxUploadBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > MaxUploadBytes {
		err = errorf(errcode.TooLarge, false, "", "a file may have at most %d bytes", MaxUploadBytes)
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		var e *errcode.Error
		if errors.As(err, &e) {
			return Upload{}, e
		}
		return Upload{}, fmt.Errorf("agent: upload: %w", err)
	}
	return Upload{Name: name, Size: n, Modified: time.Now().UTC()}, nil
}

// upload sets files of the upload area on an <input type=file>.
func (d *driver) upload(ctx context.Context, r Request) (*Result, error) {
	if len(r.Files) == 0 || len(r.Files) > MaxUploadFiles {
		return nil, errorf(errcode.InvalidArgument, false, "files: 1..64 names of files in the session's upload area", "no files to upload")
	}
	for _, name := range r.Files {
		if err := CheckUploadName(name); err != nil {
			return nil, err
		}
	}
	dir, err := d.s.UploadDir()
	if err != nil {
		return nil, errorf(errcode.NotReady, false, "", "the session has no upload area (it ended)")
	}
	paths := make([]string, 0, len(r.Files))
	files := make([]Upload, 0, len(r.Files))
	for _, name := range r.Files {
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			return nil, errorf(errcode.NotFound, false, "put it first with PUT /api/v1/sessions/{id}/uploads/{name}; list them with GET …/uploads",
				"no file %q in the session's upload area", name)
		}
		paths = append(paths, p)
		files = append(files, Upload{Name: name, Size: fi.Size(), Modified: fi.ModTime().UTC()})
	}
	el, what, err := d.element(ctx, r)
	if err != nil {
		return nil, err
	}
	var kind struct {
		File     bool `json:"file"`
		Multiple bool `json:"multiple"`
		Disabled bool `json:"disabled"`
	}
	if err := callOn(ctx, el, `function() { return {file: this.tagName === "INPUT" && this.type === "file", multiple: !!this.multiple, disabled: !!this.disabled}; }`, &kind); err != nil {
		return nil, err
	}
	switch {
	case !kind.File:
		return nil, errorf(errcode.InvalidArgument, false, "target an <input type=file>", "%s is not a file input", what)
	case kind.Disabled:
		return nil, errorf(errcode.InvalidArgument, true, "", "%s is disabled", what)
	case len(paths) > 1 && !kind.Multiple:
		return nil, errorf(errcode.InvalidArgument, false, "give one file", "%s takes one file", what)
	}
	if _, err := cdp.Call(ctx, el.Session, dom.SetFileInputFiles, dom.SetFileInputFilesParams{Files: paths, BackendNodeID: el.BackendNodeID}); err != nil {
		return nil, fmt.Errorf("agent: set files: %w", err)
	}
	return &Result{OK: true, Summary: fmt.Sprintf("set %d file(s) on %s", len(paths), what), Data: map[string]any{"files": files}}, nil
}

// callOn runs fn on the element and decodes its JSON result into out.
func callOn(ctx context.Context, el *snapshot.Element, fn string, out any) error {
	obj, err := cdp.Call(ctx, el.Session, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: el.BackendNodeID})
	if err != nil || obj.Object == nil {
		return errorf(errcode.StaleRef, true, "take a new snapshot", "the element is gone")
	}
	defer cdp.Call(context.WithoutCancel(ctx), el.Session, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: obj.Object.ObjectID})
	yes := true
	res, err := cdp.Call(ctx, el.Session, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: fn, ObjectID: obj.Object.ObjectID, ReturnByValue: &yes,
	})
	if err != nil {
		return fmt.Errorf("agent: call on element: %w", err)
	}
	if res.ExceptionDetails != nil || res.Result == nil || json.Unmarshal(res.Result.Value, out) != nil {
		return errorf(errcode.StaleRef, true, "take a new snapshot", "the element cannot be read")
	}
	return nil
}
