'use strict';
// Preloaded into reference servers under test (node --require): every TCP listen() binds
// 127.0.0.1, because those servers have no host option and would listen on all interfaces.
// Once bound it prints "bind-loopback: listening on 127.0.0.1:<port>" to stderr, so a test can
// start the server with PORT=0 and learn the real port.
const net = require('net');
const HOST = '127.0.0.1';
const originalListen = net.Server.prototype.listen;

function isPort(value) {
  return typeof value === 'number' ||
    (typeof value === 'string' && value.trim() !== '' && Number.isInteger(Number(value)));
}

net.Server.prototype.listen = function listen(...args) {
  let callback;
  if (args.length > 0 && typeof args[args.length - 1] === 'function') callback = args.pop();
  const first = args[0];
  let options;
  if (first !== null && typeof first === 'object') {
    // Unix sockets, file descriptors and handles are not TCP: leave them alone.
    if (first.path !== undefined || first.fd !== undefined || first.handle !== undefined ||
        first._handle !== undefined || typeof first.listen === 'function') {
      return originalListen.apply(this, callback ? [...args, callback] : args);
    }
    options = { ...first, host: HOST };
  } else if (first === undefined || first === null || isPort(first)) {
    options = { port: first == null ? 0 : Number(first), host: HOST };
    const rest = args.slice(1);
    if (typeof rest[0] === 'string' || rest[0] === null || rest[0] === undefined) rest.shift();
    if (typeof rest[0] === 'number') options.backlog = rest[0];
  } else {
    return originalListen.apply(this, callback ? [...args, callback] : args);
  }
  this.once('listening', () => {
    const address = this.address();
    if (address && typeof address === 'object') {
      process.stderr.write(`bind-loopback: listening on ${address.address}:${address.port}\n`);
    }
  });
  return callback ? originalListen.call(this, options, callback) : originalListen.call(this, options);
};
