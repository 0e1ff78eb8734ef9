package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/appliance/update"
)

const restoreUsage = `usage: tabcast restore FILE [--dry-run] [--force] [--pubkey F] [--require-signed] [config flags]
Restores a tabcast backup onto this appliance. What may be written, and
where, comes from this appliance's own configuration (--config, default
/etc/tabcast/config.yaml): the list tabcast backup reads. Each archive entry
is matched to that list by its role (config file, users file, API tokens,
TLS key, ...) and must name the path this configuration gives the role; a
file is written with its role's mode (secrets 0600, the config 0640, the
certificate 0644), owned by the tabcast user when run as root, never with
the mode or owner the archive records.

The whole archive is checked before anything is written. Any entry outside
the list, a path that is not the list's, a duplicate, a link or device
entry, an oversized file, a sha256 or a signature that does not match
refuses all of it, with a stable code: "refused (CODE): ...". Destination
directories must be real directories owned by root or the tabcast user and
not writable by others (a symbolic link is followed only if root made it
where only root can change it, like the image's /etc/tabcast); missing ones
are created 0700.

A signed backup (tabcast backup --sign) is verified against the update keys
(--pubkey, default /usr/share/tabcast/update.pub) and reported with its key
id; an unsigned one is reported as unsigned, and refused with
--require-signed.

Refuses to run while tabcast is running (tabcast.service active, or
something answers /healthz on this configuration's server.listen), or to
replace existing files, unless --force. --dry-run checks everything and
lists the plan, writing nothing. Exit codes: 0 done, 1 refused or failed,
2 usage.
`

// Stable codes of a refused restore, in its message: "refused (CODE): …".
const (
	codeUnreadable = "backup_unreadable"        // not a gzip'd tar, I/O error
	codeFormat     = "backup_format"            // no or bad manifest.json
	codeEntryType  = "backup_entry_not_regular" // symlink, hard link, device, directory entry
	codeEntryName  = "backup_entry_unsafe_name" // absolute, ../, unclean tar name
	codeDuplicate  = "backup_entry_duplicate"   // an entry or destination twice
	codeUnlisted   = "backup_entry_unlisted"    // a tar entry the manifest does not list
	codeMissing    = "backup_entry_missing"     // a listed entry not in the tar
	codeUnknown    = "backup_entry_unknown"     // a role this appliance does not back up
	codePath       = "backup_path_not_allowed"  // a path that is not the list's for its role
	codeTooLarge   = "backup_too_large"
	codeChecksum   = "backup_checksum_mismatch"
	codeSignature  = "backup_signature_invalid"
	codeKeys       = "backup_keys_unavailable" // signed, but update.pub cannot be read
	codeUnsigned   = "backup_unsigned"         // --require-signed
	codeParent     = "restore_parent_unsafe"   // symlink, foreign owner, not a directory
	codeDest       = "restore_destination_not_file"
	codeRunning    = "restore_appliance_running"
	codeExists     = "restore_would_replace"
	codeWrite      = "restore_write_failed"
)

// refusal is every problem found before anything was written.
type refusal struct{ problems []problem }

type problem struct{ code, msg string }

func (r *refusal) add(code, format string, a ...any) {
	r.problems = append(r.problems, problem{code, fmt.Sprintf(format, a...)})
}

func (r *refusal) err() error {
	if len(r.problems) == 0 {
		return nil
	}
	return r
}

func (r *refusal) Error() string {
	if len(r.problems) == 1 {
		p := r.problems[0]
		return fmt.Sprintf("refused (%s): %s; nothing was written", p.code, p.msg)
	}
	var codes []string
	seen := map[string]bool{}
	for _, p := range r.problems {
		if !seen[p.code] {
			seen[p.code] = true
			codes = append(codes, p.code)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "refused (%s): %d problems; nothing was written:", strings.Join(codes, ", "), len(r.problems))
	const shown = 20
	for i, p := range r.problems {
		if i == shown {
			fmt.Fprintf(&b, "\n  … and %d more", len(r.problems)-shown)
			break
		}
		fmt.Fprintf(&b, "\n  %s: %s", p.code, p.msg)
	}
	return b.String()
}

func refuse(code, format string, a ...any) error {
	var r refusal
	r.add(code, format, a...)
	return &r
}

type restoreOptions struct {
	dryRun, force, requireSigned bool
	pubkey                       string
}

func cmdRestore(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("restore", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config.AddFlags(fs)
	var o restoreOptions
	fs.BoolVar(&o.dryRun, "dry-run", false, "verify the archive and list what would be written; write nothing")
	fs.BoolVar(&o.force, "force", false, "replace existing files, and restore even while tabcast is running")
	fs.StringVar(&o.pubkey, "pubkey", defaultPubKey, "trusted update keys a signed backup is verified against")
	fs.BoolVar(&o.requireSigned, "require-signed", false, "refuse a backup that is not signed")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(stderr, restoreUsage)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "tabcast restore: %v\n%s", err, restoreUsage)
		return 2
	case fs.NArg() != 1:
		fmt.Fprint(stderr, restoreUsage)
		return 2
	}
	// The local configuration decides every destination and the address
	// probed for a running appliance; the archive decides neither.
	cfg, err := config.Load(config.Options{Defaults: defaultConfig, Environ: os.Environ(), Flags: fs})
	if err != nil {
		printConfigError(stderr, err)
		fmt.Fprintln(stderr, "tabcast restore: this appliance's configuration says where each file goes; nothing was written")
		return 1
	}
	cfgFile, _ := fs.GetString(config.FlagConfig)
	if err := restore(fs.Arg(0), o, cfg, cfgFile, stdout); err != nil {
		fmt.Fprintln(stderr, "tabcast restore:", err)
		return 1
	}
	return 0
}

// restoreItem is one archive file matched to its destination.
type restoreItem struct {
	target backupTarget // from the local backupSet: path, role, mode
	file   backupFile   // the archive's record of it
	data   []byte
	// Planned: the parent as resolved (no symlinks left), the components
	// under it still to create, and whether the file exists.
	dir     string
	missing []string
	exists  bool
}

// restore verifies the archive completely, then writes its files.
func restore(archive string, o restoreOptions, cfg *config.Config, cfgFile string, stdout io.Writer) error {
	a, err := readBackupArchive(archive)
	if err != nil {
		return err
	}
	signed, err := checkBackupSignature(a, o)
	if err != nil {
		return err
	}
	m, err := decodeBackupManifest(a.manifest)
	if err != nil {
		return err
	}
	set, err := newBackupSet(cfg, cfgFile)
	if err != nil {
		return refuse(codePath, "this appliance's list of backed-up files: %v", err)
	}
	items, err := matchBackup(m, a, set)
	if err != nil {
		return err
	}
	own := restoreOwner()
	if err := planRestore(items, own); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: tabcast %q backup of %q taken %s; %s; every sha256 matches.\n",
		archive, m.TabcastVersion, m.Host, m.Created.Format(time.RFC3339), signed)
	var existing []string
	for _, it := range items {
		if it.exists {
			existing = append(existing, it.target.Path)
		}
	}
	if o.dryRun {
		mkdirs := map[string]bool{}
		for _, it := range items {
			state := "new"
			if it.exists {
				state = "exists, would be replaced (needs --force)"
				if o.force {
					state = "exists, would be replaced"
				}
			}
			fmt.Fprintf(stdout, "  would write %04o %s (%s, %d bytes, owner %s): %s\n",
				it.target.Perm, it.target.Path, it.target.What, len(it.data), own, state)
			for i := range it.missing {
				if d := filepath.Join(append([]string{it.dir}, it.missing[:i+1]...)...); !mkdirs[d] {
					mkdirs[d] = true
					fmt.Fprintf(stdout, "    would create directory %s (0700, owner %s)\n", d, own)
				}
			}
		}
		for _, s := range m.Skipped {
			fmt.Fprintf(stdout, "  not in the backup: %q (%q): %q\n", s.Path, s.What, s.Reason)
		}
		return nil
	}
	if !o.force {
		// First, because stopping the appliance is the first thing to do.
		if serviceActive() {
			return refuse(codeRunning, "tabcast.service is active: stop it first (systemctl stop tabcast) or use --force")
		}
		if u, ok := healthAnswers(cfg.Server.Listen); ok {
			return refuse(codeRunning, "an appliance answers on %s (this configuration's server.listen): stop it first or use --force", u)
		}
		if len(existing) > 0 {
			return refuse(codeExists, "refusing to replace existing files (use --force): %s", strings.Join(existing, ", "))
		}
	}
	var written []string
	for _, it := range items {
		created, err := writeRestored(it, own)
		for _, d := range created {
			fmt.Fprintf(stdout, "  created directory %s (0700, owner %s)\n", d, own)
		}
		if err != nil {
			done := "none"
			if len(written) > 0 {
				done = strings.Join(written, ", ")
			}
			return fmt.Errorf("failed (%s): %s: %w (already restored: %s)", codeWrite, it.target.Path, err, done)
		}
		written = append(written, it.target.Path)
		note := ""
		if it.file.Mode != fmt.Sprintf("%04o", it.target.Perm) {
			note = fmt.Sprintf("; the archive's mode %q not used", it.file.Mode)
		}
		fmt.Fprintf(stdout, "  restored %04o %s (%s, owner %s%s)\n", it.target.Perm, it.target.Path, it.target.What, own, note)
	}
	fmt.Fprintf(stdout, "Restored %d file(s) from %s.\n", len(written), archive)
	return nil
}

// backupArchive is an archive read whole (it is small: backupMaxTotal).
type backupArchive struct {
	manifest, sig []byte // sig nil: unsigned
	data          map[string][]byte
}

// readBackupArchive reads every entry, refusing anything but regular files
// with safe, unique names within the size limits.
func readBackupArchive(path string) (*backupArchive, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, refuse(codeUnreadable, "%v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, refuse(codeUnreadable, "%s: not a gzip'd tar: %v", path, err)
	}
	tr := tar.NewReader(zr)
	var r refusal
	a := &backupArchive{data: map[string][]byte{}}
	seen := map[string]bool{}
	var total int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			r.add(codeUnreadable, "read %s: %v", path, err)
			break
		}
		name := hdr.Name
		switch {
		case hdr.Typeflag != tar.TypeReg:
			r.add(codeEntryType, "entry %q is not a regular file (tar type %q)", name, hdr.Typeflag)
			continue
		case !safeEntryName(name):
			r.add(codeEntryName, "entry %q: unsafe path", name)
			continue
		case seen[name]:
			r.add(codeDuplicate, "entry %q appears twice", name)
			continue
		}
		seen[name] = true
		limit := backupMaxFile
		if name == backupManifestName {
			limit = backupMaxManifest
		}
		if hdr.Size > limit || total+hdr.Size > backupMaxTotal {
			r.add(codeTooLarge, "entry %q: %d bytes, more than a backup holds (%d per file, %d in all)", name, hdr.Size, limit, backupMaxTotal)
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, hdr.Size+1))
		if err != nil || int64(len(b)) != hdr.Size {
			r.add(codeUnreadable, "read entry %q: %v (truncated?)", name, err)
			break
		}
		total += hdr.Size
		switch name {
		case backupManifestName:
			a.manifest = b
		case backupSigName:
			a.sig = b
		default:
			a.data[name] = b
		}
	}
	if a.manifest == nil && len(r.problems) == 0 {
		r.add(codeFormat, "%s is not a tabcast backup (no manifest.json)", path)
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	return a, nil
}

// safeEntryName accepts a relative, clean, printable name that stays inside
// the archive.
func safeEntryName(name string) bool {
	if !filepath.IsLocal(name) || filepath.Clean(name) != name || strings.Contains(name, `\`) {
		return false
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return false
		}
	}
	return true
}

// checkBackupSignature verifies manifest.sig, when there is one, with the
// update bundles' check and keys, before the manifest is even decoded. It
// returns what to tell the operator.
func checkBackupSignature(a *backupArchive, o restoreOptions) (string, error) {
	if a.sig == nil {
		if o.requireSigned {
			return "", refuse(codeUnsigned, "the backup is not signed (--require-signed)")
		}
		return "UNSIGNED (nothing shows who made it; tabcast backup --sign makes signed ones)", nil
	}
	keys, err := update.LoadPublicKeys(o.pubkey)
	if err != nil {
		return "", refuse(codeKeys, "the backup is signed but cannot be checked: %v (--pubkey)", err)
	}
	k, err := update.VerifyManifest(keys, a.manifest, a.sig, "the backup's")
	if err != nil {
		return "", refuse(codeSignature, "%v (keys: %s)", err, o.pubkey)
	}
	return fmt.Sprintf("signed by update key %s (verified against %s)", update.KeyID(k.Key), o.pubkey), nil
}

func decodeBackupManifest(b []byte) (*backupManifest, error) {
	var m backupManifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, refuse(codeFormat, "manifest.json: %v", err)
	}
	if dec.More() {
		return nil, refuse(codeFormat, "manifest.json: trailing data")
	}
	if m.Version != backupFormat {
		return nil, refuse(codeFormat, "manifest.json: version %d, this tabcast reads %d", m.Version, backupFormat)
	}
	return &m, nil
}

// knownRoles are the roles any appliance backs up.
var knownRoles = map[string]bool{roleConfig: true, roleConfigDir: true, roleUsers: true, roleInitialPW: true,
	roleTokens: true, roleTLSCert: true, roleTLSKey: true, roleTURNSecret: true, roleAgentToken: true, roleProxyCreds: true}

// matchBackup gives each manifest file its destination in set, by role.
// The path the archive records must be the one set has for that role: it
// only confirms the match, the destination is always set's.
func matchBackup(m *backupManifest, a *backupArchive, set *backupSet) ([]*restoreItem, error) {
	var r refusal
	dests := map[string]bool{}
	listed := map[string]bool{}
	var items []*restoreItem
	for _, f := range m.Files {
		if !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path || strings.Contains(f.Path, `\`) {
			r.add(codePath, "%q (%q): not a clean absolute path", f.Path, f.What)
			continue
		}
		if f.Entry != "files"+f.Path {
			r.add(codePath, "%s: entry %q is not files%s", f.Path, f.Entry, f.Path)
			continue
		}
		listed[f.Entry] = true
		var t backupTarget
		switch nt, ok := set.role(f.What); {
		case f.What == roleConfigDir:
			if set.ConfigDir == "" {
				r.add(codeUnknown, "%s (config directory): this appliance's config file %s is not in %s, so no config directory files are restored",
					f.Path, set.Named[0].Path, filepath.Clean(dedicatedConfigDir))
				continue
			}
			if filepath.Dir(f.Path) != set.ConfigDir {
				r.add(codePath, "%s (config directory): not a file directly in this appliance's config directory %s", f.Path, set.ConfigDir)
				continue
			}
			if err := configDirName(filepath.Base(f.Path)); err != nil {
				r.add(codePath, "%q (config directory): %v", f.Path, err)
				continue
			}
			if other, ok := set.named(f.Path); ok {
				r.add(codeDuplicate, "%s: listed as a config directory file, but it is this appliance's %s", f.Path, other.What)
				continue
			}
			t = backupTarget{Path: f.Path, What: roleConfigDir, Perm: configDirPerm}
		case !ok && knownRoles[f.What]:
			r.add(codeUnknown, "%s (%s): this appliance's configuration has no %s", f.Path, f.What, f.What)
			continue
		case !ok:
			r.add(codeUnknown, "%q: %q is not a kind of file tabcast backs up", f.Path, f.What)
			continue
		case f.Path != nt.Path:
			r.add(codePath, "%s (%s): this appliance's configuration puts it at %s; restore writes only the paths it names (--config: the configuration the backup was taken with)",
				f.Path, f.What, nt.Path)
			continue
		default:
			t = nt
		}
		if dests[t.Path] {
			r.add(codeDuplicate, "%s (%s) is listed twice", t.Path, t.What)
			continue
		}
		dests[t.Path] = true
		b, ok := a.data[f.Entry]
		if !ok {
			r.add(codeMissing, "%s (%s): entry %s is not in the archive", f.Path, f.What, f.Entry)
			continue
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(b)) != f.Size {
			// No digests in the message: one of a short secret (the
			// one-time password) could be brute-forced from a pasted log.
			r.add(codeChecksum, "%s (%s): %d bytes whose sha256 is not the manifest's (%d bytes): damaged or altered", f.Path, f.What, len(b), f.Size)
			continue
		}
		items = append(items, &restoreItem{target: t, file: f, data: b})
	}
	var extra []string
	for name := range a.data {
		if !listed[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		r.add(codeUnlisted, "entry %q is not in the manifest", name)
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	return items, nil
}

// serviceUser owns what restore writes when run as root, as it owns what the
// appliance writes itself (tabcast.service: User=tabcast). A variable for
// tests.
var serviceUser = "tabcast"

// fileOwner is who restored files and created directories belong to.
type fileOwner struct {
	uid, gid int
	name     string          // for the operator
	chown    bool            // root: give them to uid:gid
	dirs     map[uint32]bool // who may own a destination directory
}

func (o fileOwner) String() string { return fmt.Sprintf("%s %d:%d", o.name, o.uid, o.gid) }

// restoreOwner applies the appliance's rule: as root, the service user
// (root itself on a box without one); otherwise the files are the
// writer's. Destination directories may belong to root or that user.
func restoreOwner() fileOwner {
	euid := os.Geteuid()
	o := fileOwner{uid: euid, gid: os.Getegid(), name: "this user", dirs: map[uint32]bool{0: true, uint32(euid): true}}
	if euid != 0 {
		return o
	}
	o.chown, o.name = true, "root (no "+serviceUser+" user)"
	if u, err := user.Lookup(serviceUser); err == nil {
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			o.uid, o.gid, o.name = uid, gid, serviceUser
			o.dirs[uint32(uid)] = true
		}
	}
	return o
}

// planRestore resolves each destination's directory and notes what exists.
func planRestore(items []*restoreItem, own fileOwner) error {
	var r refusal
	for _, it := range items {
		dir, missing, err := resolveDir(filepath.Dir(it.target.Path), own.dirs)
		if err != nil {
			r.add(codeParent, "%s (%s): %v", it.target.Path, it.target.What, err)
			continue
		}
		it.dir, it.missing = dir, missing
		if len(missing) > 0 {
			continue
		}
		st, err := os.Lstat(filepath.Join(dir, filepath.Base(it.target.Path)))
		switch {
		case err == nil && (st.Mode().IsRegular() || st.Mode()&fs.ModeSymlink != 0):
			// A symlink is replaced, never followed: the file is renamed
			// over it.
			it.exists = true
		case err == nil:
			r.add(codeDest, "%s is a %s, not a file", it.target.Path, st.Mode().Type())
		case !errors.Is(err, fs.ErrNotExist):
			r.add(codeDest, "%s: %v", it.target.Path, err)
		}
	}
	return r.err()
}

// maxLinks bounds the trusted symlinks followed while resolving a path.
const maxLinks = 40

// resolveDir resolves dir for writing. Every directory on the way must be a
// real directory owned by one of owners and not writable by group or others
// (unless sticky, like /tmp). A symbolic link is followed only when root
// owns it and every directory down to it is root's and closed to others:
// then only root could have made or changed it (the image's /etc/tabcast ->
// /var/lib/tabcast/etc); any other link, e.g. one the service user put in a
// directory it owns, is refused. It returns the resolved directory that
// exists and the components under it still to create.
func resolveDir(dir string, owners map[uint32]bool) (string, []string, error) {
	links := 0
	path := filepath.Clean(dir)
restart:
	if !filepath.IsAbs(path) {
		return "", nil, fmt.Errorf("%s: not an absolute path", path)
	}
	st, err := os.Lstat("/")
	if err != nil {
		return "", nil, err
	}
	if err := dirProblem("/", st, owners); err != nil {
		return "", nil, err
	}
	rootOnly := rootOnlyDir(st)
	cur := "/"
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, p := range parts {
		if p == "" {
			continue
		}
		next := filepath.Join(cur, p)
		st, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return cur, parts[i:], nil
		case err != nil:
			return "", nil, err
		case st.Mode()&fs.ModeSymlink != 0:
			if !rootOnly || statUID(st) != 0 {
				return "", nil, fmt.Errorf("%s is a symbolic link (owner uid %d) in a directory others than root can change: not followed", next, statUID(st))
			}
			if links++; links > maxLinks {
				return "", nil, fmt.Errorf("%s: too many symbolic links", dir)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			path = filepath.Join(append([]string{target}, parts[i+1:]...)...)
			goto restart
		}
		if err := dirProblem(next, st, owners); err != nil {
			return "", nil, err
		}
		rootOnly = rootOnly && rootOnlyDir(st)
		cur = next
	}
	return cur, nil, nil
}

func statUID(st os.FileInfo) uint32 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Uid
	}
	return ^uint32(0)
}

func rootOnlyDir(st os.FileInfo) bool {
	return statUID(st) == 0 && (st.Mode().Perm()&0o022 == 0 || st.Mode()&fs.ModeSticky != 0)
}

// dirProblem is why path (st from Lstat) may not hold a restored file.
func dirProblem(path string, st os.FileInfo, owners map[uint32]bool) error {
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", path, st.Mode().Type())
	}
	return dirModeProblem(path, statUID(st), st.Mode().Perm(), st.Mode()&fs.ModeSticky != 0, owners)
}

func dirModeProblem(path string, uid uint32, perm os.FileMode, sticky bool, owners map[uint32]bool) error {
	switch {
	case !owners[uid]:
		return fmt.Errorf("%s is owned by uid %d, not root or the %s user", path, uid, serviceUser)
	case perm&0o022 != 0 && !sticky:
		return fmt.Errorf("%s is writable by group or others (%04o)", path, perm)
	}
	return nil
}

// writeRestored writes it.target through directory descriptors opened
// without following links, so that what was checked is what is written:
// a link or a foreign directory swapped in after the plan makes it fail.
// It returns the directories it created.
func writeRestored(it *restoreItem, own fileOwner) ([]string, error) {
	dirfd, created, err := openDirNoFollow(it.dir, it.missing, own)
	if err != nil {
		return created, err
	}
	defer syscall.Close(dirfd)
	return created, writeFileAt(dirfd, filepath.Base(it.target.Path), it.data, it.target.Perm, own)
}

// openDirNoFollow opens dir and then the missing components under it
// (creating them 0700, owned by own), one at a time from "/" with
// O_NOFOLLOW, checking each directory as resolveDir did.
func openDirNoFollow(dir string, missing []string, own fileOwner) (int, []string, error) {
	fd, err := syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, err
	}
	var comps []string
	for _, c := range strings.Split(strings.TrimPrefix(filepath.Clean(dir), "/"), "/") {
		if c != "" {
			comps = append(comps, c)
		}
	}
	nExisting := len(comps)
	comps = append(comps, missing...)
	var created []string
	cur := "/"
	for i, c := range comps {
		next := filepath.Join(cur, c)
		const flags = syscall.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
		nfd, err := syscall.Openat(fd, c, flags, 0)
		if errors.Is(err, syscall.ENOENT) && i >= nExisting {
			made := false
			switch err := syscall.Mkdirat(fd, c, 0o700); {
			case err == nil:
				made = true
				created = append(created, next)
			case !errors.Is(err, syscall.EEXIST): // EEXIST: an earlier file's directory
				syscall.Close(fd)
				return -1, created, fmt.Errorf("create %s: %w", next, err)
			}
			nfd, err = syscall.Openat(fd, c, flags, 0)
			if err == nil && made && own.chown {
				if err := syscall.Fchown(nfd, own.uid, own.gid); err != nil {
					syscall.Close(nfd)
					syscall.Close(fd)
					return -1, created, fmt.Errorf("chown %s: %w", next, err)
				}
			}
		}
		syscall.Close(fd)
		if err != nil {
			// ELOOP or ENOTDIR: a link or a file took a directory's place.
			return -1, created, fmt.Errorf("open %s without following links: %w", next, err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(nfd, &st); err != nil {
			syscall.Close(nfd)
			return -1, created, err
		}
		if err := dirModeProblem(next, st.Uid, os.FileMode(st.Mode&0o777), st.Mode&syscall.S_ISVTX != 0, own.dirs); err != nil {
			syscall.Close(nfd)
			return -1, created, err
		}
		fd, cur = nfd, next
	}
	return fd, created, nil
}

// writeFileAt replaces name in dirfd atomically: a new temp file (never an
// existing one, never through a link) with the owner and mode, fsync,
// rename over name, fsync of the directory.
func writeFileAt(dirfd int, name string, data []byte, perm os.FileMode, own fileOwner) error {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	// ".tmp-" in the name: backup skips it if a crash leaves it behind.
	tmp := "." + name + ".tmp-" + hex.EncodeToString(rnd[:])
	fd, err := syscall.Openat(dirfd, tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create a temp file: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = syscall.Unlinkat(dirfd, tmp)
		}
	}()
	if own.chown {
		if err := f.Chown(own.uid, own.gid); err != nil {
			return err
		}
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := syscall.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	ok = true
	_ = syscall.Fsync(dirfd) // persist the rename; best effort
	return nil
}
