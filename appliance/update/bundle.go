package update

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// Bundle format (an uncompressed tar, members in exactly this order, each a
// regular file with exactly this name):
//
//	manifest.json   Manifest, at most MaxManifest bytes
//	manifest.sig    the 64-byte ed25519 signature of manifest.json's bytes
//	rootfs.img.gz   gzip of the root file system image (ext4)
//	vmlinuz         the kernel
//	initrd.img      the initrd
const (
	Format        = 1
	Product       = "tabcast"
	MaxManifest   = 64 << 10
	MemberMan     = "manifest.json"
	MemberSig     = "manifest.sig"
	MemberRootFS  = "rootfs.img.gz"
	MemberKernel  = "vmlinuz"
	MemberInitrd  = "initrd.img"
	maxKernel     = 64 << 20
	maxInitrd     = 192 << 20
	maxRootFS     = 1 << 40
	copyBufSize   = 1 << 20
	bundleVersion = `^[A-Za-z0-9][A-Za-z0-9._+~_-]{0,63}$`
)

// payloadNames are the members after the signature, in order.
var payloadNames = []string{MemberRootFS, MemberKernel, MemberInitrd}

var versionRE = regexp.MustCompile(bundleVersion)

// Manifest is manifest.json.
type Manifest struct {
	Format  int       `json:"format"`
	Product string    `json:"product"`
	Version string    `json:"version"`
	Created time.Time `json:"created"`
	// Files are the payload members in bundle order.
	Files []File `json:"files"`
}

// File is one payload member.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// The root file system image itself (rootfs.img.gz only).
	UncompressedSize   int64  `json:"uncompressedSize,omitempty"`
	UncompressedSHA256 string `json:"uncompressedSha256,omitempty"`
}

// File returns the manifest's entry for name.
func (m *Manifest) File(name string) File {
	for _, f := range m.Files {
		if f.Name == name {
			return f
		}
	}
	return File{}
}

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// check validates a decoded manifest.
func (m *Manifest) check() error {
	if m.Format != Format {
		return fmt.Errorf("manifest.json: format %d, this tabcast reads format %d", m.Format, Format)
	}
	if m.Product != Product {
		return fmt.Errorf("manifest.json: product %q is not %q", m.Product, Product)
	}
	if !versionRE.MatchString(m.Version) {
		return fmt.Errorf("manifest.json: version %q is not a valid version (%s)", m.Version, bundleVersion)
	}
	if len(m.Files) != len(payloadNames) {
		return fmt.Errorf("manifest.json: %d files, want %d (%v)", len(m.Files), len(payloadNames), payloadNames)
	}
	for i, f := range m.Files {
		if f.Name != payloadNames[i] {
			return fmt.Errorf("manifest.json: file %d is %q, want %q", i, f.Name, payloadNames[i])
		}
		limit := int64(maxRootFS)
		switch f.Name {
		case MemberKernel:
			limit = maxKernel
		case MemberInitrd:
			limit = maxInitrd
		}
		if f.Size <= 0 || f.Size > limit {
			return fmt.Errorf("manifest.json: %s size %d out of range (1..%d)", f.Name, f.Size, limit)
		}
		if !hexRE.MatchString(f.SHA256) {
			return fmt.Errorf("manifest.json: %s sha256 %q is not 64 lowercase hex digits", f.Name, f.SHA256)
		}
		if f.Name == MemberRootFS {
			if f.UncompressedSize <= 0 || f.UncompressedSize > maxRootFS || !hexRE.MatchString(f.UncompressedSHA256) {
				return fmt.Errorf("manifest.json: %s needs uncompressedSize and uncompressedSha256", f.Name)
			}
		} else if f.UncompressedSize != 0 || f.UncompressedSHA256 != "" {
			return fmt.Errorf("manifest.json: %s has uncompressed fields", f.Name)
		}
	}
	return nil
}

// PackOptions are the inputs of Pack.
type PackOptions struct {
	Key                    ed25519.PrivateKey
	Version                string
	RootFS, Kernel, Initrd string // input files
	Out                    string // the bundle; must not exist
	Created                time.Time
}

// Pack writes a signed bundle. The root file system is gzip'd to a temp
// file next to Out first (the tar header needs its size).
func Pack(o PackOptions) (*Manifest, error) {
	if !versionRE.MatchString(o.Version) {
		return nil, fmt.Errorf("version %q is not a valid version (%s)", o.Version, bundleVersion)
	}
	if _, err := os.Lstat(o.Out); err == nil {
		return nil, fmt.Errorf("%s already exists", o.Out)
	}
	if o.Created.IsZero() {
		o.Created = time.Now()
	}
	dir := filepath.Dir(o.Out)
	gz, err := os.CreateTemp(dir, ".tcupdate-rootfs-*.gz")
	if err != nil {
		return nil, err
	}
	defer func() { gz.Close(); os.Remove(gz.Name()) }()
	rf, err := os.Open(o.RootFS)
	if err != nil {
		return nil, err
	}
	defer rf.Close()
	rawSum, gzSum := sha256.New(), sha256.New()
	cw := &countWriter{w: io.MultiWriter(gz, gzSum)}
	zw, err := gzip.NewWriterLevel(cw, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	raw, err := io.CopyBuffer(io.MultiWriter(zw, rawSum), rf, make([]byte, copyBufSize))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", o.RootFS, err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	m := &Manifest{Format: Format, Product: Product, Version: o.Version, Created: o.Created.UTC().Truncate(time.Second)}
	m.Files = append(m.Files, File{Name: MemberRootFS, Size: cw.n, SHA256: hexSum(gzSum),
		UncompressedSize: raw, UncompressedSHA256: hexSum(rawSum)})
	for _, p := range []struct{ name, path string }{{MemberKernel, o.Kernel}, {MemberInitrd, o.Initrd}} {
		n, sum, err := hashFile(p.path)
		if err != nil {
			return nil, err
		}
		m.Files = append(m.Files, File{Name: p.name, Size: n, SHA256: sum})
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	mj = append(mj, '\n')
	sig := ed25519.Sign(o.Key, mj)

	out, err := os.CreateTemp(dir, ".tcupdate-*.tmp")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			out.Close()
			os.Remove(out.Name())
		}
	}()
	tw := tar.NewWriter(out)
	add := func(name string, size int64, r io.Reader, want string) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: m.Created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		h := sha256.New()
		n, err := io.CopyBuffer(io.MultiWriter(tw, h), io.LimitReader(r, size+1), make([]byte, copyBufSize))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if n != size || (want != "" && hexSum(h) != want) {
			return fmt.Errorf("%s changed while packing", name)
		}
		return nil
	}
	if err := add(MemberMan, int64(len(mj)), bytes.NewReader(mj), ""); err != nil {
		return nil, err
	}
	if err := add(MemberSig, int64(len(sig)), bytes.NewReader(sig), ""); err != nil {
		return nil, err
	}
	if _, err := gz.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if err := add(MemberRootFS, cw.n, gz, m.Files[0].SHA256); err != nil {
		return nil, err
	}
	for _, p := range []struct{ name, path string }{{MemberKernel, o.Kernel}, {MemberInitrd, o.Initrd}} {
		f, err := os.Open(p.path)
		if err != nil {
			return nil, err
		}
		fe := m.File(p.name)
		err = add(p.name, fe.Size, f, fe.SHA256)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := out.Chmod(0o644); err != nil {
		return nil, err
	}
	if err := out.Sync(); err != nil {
		return nil, err
	}
	if err := out.Close(); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(o.Out); err == nil {
		return nil, fmt.Errorf("%s already exists", o.Out)
	}
	if err := os.Rename(out.Name(), o.Out); err != nil {
		return nil, err
	}
	ok = true
	return m, nil
}

func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, make([]byte, copyBufSize))
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", path, err)
	}
	return n, hexSum(h), nil
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// bundleReader reads a bundle front to back.
type bundleReader struct {
	tr       *tar.Reader
	Manifest *Manifest
	Signer   *PublicKey
	next     int // index into payloadNames
}

// openBundle reads manifest.json and manifest.sig and verifies the
// signature before anything else is decoded; nothing after the signature
// has been read when it returns.
func openBundle(r io.Reader, keys []PublicKey) (*bundleReader, error) {
	tr := tar.NewReader(r)
	mj, err := readSmallMember(tr, MemberMan, MaxManifest)
	if err != nil {
		return nil, err
	}
	sig, err := readSmallMember(tr, MemberSig, ed25519.SignatureSize)
	if err != nil {
		return nil, err
	}
	signer, err := verifyAny(keys, mj, sig)
	if err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(mj))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if dec.More() {
		return nil, errors.New("manifest.json: trailing data")
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return &bundleReader{tr: tr, Manifest: &m, Signer: signer}, nil
}

// nextHeader reads the next member's header and checks that it is a
// regular file called want.
func nextHeader(tr *tar.Reader, want string) (*tar.Header, error) {
	hdr, err := tr.Next()
	if err == io.EOF {
		return nil, fmt.Errorf("not a complete tabcast update bundle: %s missing (truncated?)", want)
	}
	if err != nil {
		return nil, fmt.Errorf("read bundle (%s): %w", want, err)
	}
	if hdr.Name != want {
		return nil, fmt.Errorf("not a tabcast update bundle: member %q where %s belongs", hdr.Name, want)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("bundle member %s is not a regular file", want)
	}
	return hdr, nil
}

func readSmallMember(tr *tar.Reader, name string, max int64) ([]byte, error) {
	hdr, err := nextHeader(tr, name)
	if err != nil {
		return nil, err
	}
	if hdr.Size > max {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed", name, hdr.Size, max)
	}
	b, err := io.ReadAll(io.LimitReader(tr, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(b)) != hdr.Size {
		return nil, fmt.Errorf("read %s: truncated", name)
	}
	return b, nil
}

// payload is an open payload member: Read gives exactly the member's
// bytes, and check (after reading to the end) compares size and sha256
// with the manifest.
type payload struct {
	File File
	r    io.Reader
	h    hash.Hash
	n    int64
}

func (p *payload) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	p.h.Write(b[:n])
	return n, err
}

func (p *payload) check() error {
	// Drain anything left (a reader that stopped early).
	if _, err := io.CopyBuffer(io.Discard, p, make([]byte, 32<<10)); err != nil {
		return fmt.Errorf("read %s: %w", p.File.Name, err)
	}
	if p.n != p.File.Size {
		return fmt.Errorf("%s: %d bytes, manifest says %d (truncated bundle?)", p.File.Name, p.n, p.File.Size)
	}
	if got := hexSum(p.h); got != p.File.SHA256 {
		return fmt.Errorf("%s: sha256 %s, manifest says %s (damaged or altered)", p.File.Name, got, p.File.SHA256)
	}
	return nil
}

// nextPayload opens the next payload member, which must be want.
func (b *bundleReader) nextPayload(want string) (*payload, error) {
	if b.next >= len(payloadNames) || payloadNames[b.next] != want {
		return nil, fmt.Errorf("internal: payload %s out of order", want)
	}
	b.next++
	hdr, err := nextHeader(b.tr, want)
	if err != nil {
		return nil, err
	}
	f := b.Manifest.File(want)
	if hdr.Size != f.Size {
		return nil, fmt.Errorf("%s: member is %d bytes, manifest says %d", want, hdr.Size, f.Size)
	}
	return &payload{File: f, r: io.LimitReader(b.tr, f.Size), h: sha256.New()}, nil
}

// end checks that nothing follows the last payload.
func (b *bundleReader) end() error {
	hdr, err := b.tr.Next()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read bundle end: %w", err)
	}
	return fmt.Errorf("not a tabcast update bundle: unexpected member %q after %s", hdr.Name, MemberInitrd)
}

// rootfsReader decompresses the rootfs payload and checks the image's size
// and sha256 when drained through check.
type rootfsReader struct {
	p  *payload
	zr *gzip.Reader
	h  hash.Hash
	n  int64
}

func newRootFSReader(p *payload) (*rootfsReader, error) {
	zr, err := gzip.NewReader(p)
	if err != nil {
		return nil, fmt.Errorf("%s: not gzip: %w", MemberRootFS, err)
	}
	return &rootfsReader{p: p, zr: zr, h: sha256.New()}, nil
}

// Read stops with an error once more than the manifest's size came out.
func (r *rootfsReader) Read(b []byte) (int, error) {
	n, err := r.zr.Read(b)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%s: %w", MemberRootFS, err)
	}
	r.n += int64(n)
	r.h.Write(b[:n])
	if r.n > r.p.File.UncompressedSize {
		return n, fmt.Errorf("%s: the image is larger than the manifest's %d bytes", MemberRootFS, r.p.File.UncompressedSize)
	}
	return n, err
}

func (r *rootfsReader) check() error {
	if r.n != r.p.File.UncompressedSize {
		return fmt.Errorf("%s: the image is %d bytes, manifest says %d", MemberRootFS, r.n, r.p.File.UncompressedSize)
	}
	if got := hexSum(r.h); got != r.p.File.UncompressedSHA256 {
		return fmt.Errorf("%s: the image's sha256 is %s, manifest says %s (damaged or altered)", MemberRootFS, got, r.p.File.UncompressedSHA256)
	}
	return r.p.check()
}

// Verify reads a whole bundle and checks its signature and every payload's
// size and sha256, writing nothing.
func Verify(r io.Reader, keys []PublicKey) (*Manifest, *PublicKey, error) {
	b, err := openBundle(r, keys)
	if err != nil {
		return nil, nil, err
	}
	p, err := b.nextPayload(MemberRootFS)
	if err != nil {
		return nil, nil, err
	}
	rr, err := newRootFSReader(p)
	if err != nil {
		return nil, nil, err
	}
	if _, err := io.CopyBuffer(io.Discard, rr, make([]byte, copyBufSize)); err != nil {
		return nil, nil, err
	}
	if err := rr.check(); err != nil {
		return nil, nil, err
	}
	for _, name := range payloadNames[1:] {
		p, err := b.nextPayload(name)
		if err != nil {
			return nil, nil, err
		}
		if err := p.check(); err != nil {
			return nil, nil, err
		}
	}
	if err := b.end(); err != nil {
		return nil, nil, err
	}
	return b.Manifest, b.Signer, nil
}
