// Package web holds the panel (the pages, their ES modules and style.css:
// plain ES modules, no build step) and welcome.html, the start page a new
// session opens. The files are embedded and served as they are. The
// viewer is index.html: app.js with signaling.js, view.js and stats.js,
// and input.js with its parts; dom.js and header.js serve every page.
package web

import "embed"

// FS holds the panel files at its root.
//
//go:embed *.html *.js *.css
var FS embed.FS
