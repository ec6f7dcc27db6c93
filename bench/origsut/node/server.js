// One server of the original fero (the npm package, pinned by the Go
// side), for fero-bench. It serves the resource "fero-bench" with the
// original's default handler: no `from` is given, so every UPDATE is
// appended to its partition's log, applied to the server's copy and
// committed to every peer and client, and the request is answered.
//
// argv[2] is JSON: { host, port }; port 0 lets the kernel pick. The
// original's UDP multicast discovery is off: there is one server, and its
// clients are given its address. Once it listens the script prints its
// address, "host:port", on a line of its own: the Go side's readiness. It
// runs until SIGTERM.
'use strict'

const spec = JSON.parse(process.argv[2])
const fero = require('fero')

const fail = message => {
  process.stderr.write(`fero-1.7.1 server: ${message}\n`)
  process.exit(1)
}

process.on('SIGTERM', () => process.exit(0))

fero('fero-bench', { hosts: [spec.host], ports: spec.port ? [spec.port] : [], multicast: false })
  .then(resource => {
    if (!resource.peers.me) fail('started without a TCP server')
    process.stdout.write(`${resource.peers.me.address}\n`)
  })
  .catch(e => fail(e && e.stack || e))
