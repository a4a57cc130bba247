export * from './common.js';
export * from './inventory.js';
export * from './desired.js';
export * from './heartbeat.js';
export * from './enrollment.js';
export * from './stream.js';
export * from './machine.js';
