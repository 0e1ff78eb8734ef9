package update

import "crypto/ed25519"

// Other artifacts the update key vouches for (tabcast backup --sign) use the
// bundle's scheme unchanged: a manifest.json whose bytes are signed with
// ed25519 (manifest.sig) and that holds the sha256 of everything else, and
// the same trusted keys (update.pub). One scheme, one key, one check.

// SignManifest is manifest.sig for manifest's exact bytes, as Pack makes it.
func SignManifest(key ed25519.PrivateKey, manifest []byte) []byte {
	return ed25519.Sign(key, manifest)
}

// VerifyManifest returns the trusted key whose signature sig is of
// manifest's exact bytes, or an error naming whose signature it is
// ("the backup's"). It is the check a bundle's manifest gets.
func VerifyManifest(keys []PublicKey, manifest, sig []byte, whose string) (*PublicKey, error) {
	return verifySigned(keys, manifest, sig, whose)
}
