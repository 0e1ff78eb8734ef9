package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/core/audit"
)

func tokensCmd(data string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	args = append(append([]string{"tokens"}, args...), "--set", "server.dataDir="+data)
	code := realMain(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func auditRecords(t *testing.T, path string) []audit.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// Tokens made and revoked on the CLI are in the audit trail as the API
// records them (action, detail), never with the secret.
func TestTokensCLIAudited(t *testing.T) {
	data := t.TempDir()
	if os.Geteuid() == 0 {
		// The appliance's data directory is the tabcast user's; nobody
		// stands for it. Root's writes must stay that user's files.
		if err := os.Chown(data, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	code, secret, stderr := tokensCmd(data, "create", "ci", "--user", "alice", "--role", "viewer")
	if code != 0 {
		t.Fatalf("tokens create: exit %d: %s", code, stderr)
	}
	secret = strings.TrimSpace(secret)
	fields := strings.Fields(stderr) // "token <id> for alice ..."
	if len(fields) < 2 || fields[0] != "token" {
		t.Fatalf("tokens create said %q", stderr)
	}
	id := fields[1]
	if code, _, stderr = tokensCmd(data, "revoke", id); code != 0 {
		t.Fatalf("tokens revoke: exit %d: %s", code, stderr)
	}
	if code, _, _ = tokensCmd(data, "list"); code != 0 {
		t.Fatalf("tokens list: exit %d", code)
	}

	log := filepath.Join(data, "audit.log")
	recs := auditRecords(t, log)
	if len(recs) != 2 {
		t.Fatalf("audit log has %d records, want create and revoke (list is not a change): %+v", len(recs), recs)
	}
	if r := recs[0]; r.Action != "token.create" || r.Outcome != audit.OK || r.Detail != "token "+id+" for alice (viewer)" ||
		!strings.HasPrefix(r.Source, "cli:") || r.Time.IsZero() {
		t.Errorf("create record: %+v", r)
	}
	if r := recs[1]; r.Action != "token.revoke" || r.Outcome != audit.OK || r.Detail != "token "+id || !strings.HasPrefix(r.Source, "cli:") {
		t.Errorf("revoke record: %+v", r)
	}
	if b, _ := os.ReadFile(log); secret == "" || bytes.Contains(b, []byte(secret)) {
		t.Errorf("the audit log holds the secret (or none was printed: %q)", secret)
	}
	if os.Geteuid() == 0 {
		for _, p := range []string{log, filepath.Join(data, "tokens.json"), filepath.Join(data, "tokens.json.lock")} {
			if st, err := os.Stat(p); err != nil || statUID(st) != nobody {
				t.Errorf("%s: owner %d (%v), want the data directory's (%d)", p, statUID(st), err, nobody)
			}
		}
	}
}

// When the audit log cannot be written, no token is made.
func TestTokensCLIRefusesUnaudited(t *testing.T) {
	data := t.TempDir()
	if err := os.Mkdir(filepath.Join(data, "audit.log"), 0o700); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := tokensCmd(data, "create", "ci", "--user", "alice")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "nothing was changed") {
		t.Errorf("tokens create without an audit log: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(data, "tokens.json")); err == nil {
		t.Errorf("a token was made unaudited")
	}
}
