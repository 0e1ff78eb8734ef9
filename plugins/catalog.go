package plugins

// The catalog lives in the SDK rather than in core/supervisor: the SDK is
// the one package that the host (core, appliance), the plugin binaries and
// the build's own checks can all import, and it already names the kinds.
// The supervisor only runs what it is given; the catalog says what Tabcast
// ships and where each plugin plugs in.

// Role is one place a plugin fills in the appliance.
type Role struct {
	// ConfigKey is the config key that names the plugin binary filling
	// the role (the plugin's own settings are under plugins.config.<name>).
	ConfigKey string
	// Kind is the contract the role's plugin serves (KindCapture, ...).
	Kind string
	// Name is the binary Tabcast ships for the role (the repository folder
	// of its main package), also ConfigKey's default.
	Name string
}

// The roles, one per bundled plugin.
var (
	RoleCapture    = Role{ConfigKey: "plugins.capture", Kind: KindCapture, Name: "capture-cdp"}
	RoleTabCapture = Role{ConfigKey: "plugins.tabCapture", Kind: KindCapture, Name: "capture-tab"}
	RoleEncoder    = Role{ConfigKey: "plugins.encoder", Kind: KindEncoder, Name: "encoder-ffmpeg"}
	RoleAuth       = Role{ConfigKey: "auth.plugin", Kind: KindAuth, Name: "auth-local"}
	RoleTurn       = Role{ConfigKey: "turn.plugin", Kind: KindTurn, Name: "turnd"}
)

// Catalog is every role, in the order the appliance builds and ships the
// plugins (the Makefile's PLUGINS, the image scripts; catalog_test.go
// fails when one of them differs).
func Catalog() []Role {
	return []Role{RoleCapture, RoleTabCapture, RoleEncoder, RoleAuth, RoleTurn}
}

// Bundled is the names of the plugin binaries Tabcast ships, in catalog
// order.
func Bundled() []string {
	var out []string
	for _, s := range Catalog() {
		out = append(out, s.Name)
	}
	return out
}

// Kinds is the plugin kinds, each once.
func Kinds() []string { return []string{KindCapture, KindEncoder, KindAuth, KindTurn} }
