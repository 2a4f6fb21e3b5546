// The workflow bundle's entry point (the worker loads this module).
export { backfillWorkflow } from './backfill.js';
export { consumerWorkflow } from './consumer.js';
export { maintenanceWorkflow } from './maintenance.js';
export { rebindWorkflow } from './rebind.js';
