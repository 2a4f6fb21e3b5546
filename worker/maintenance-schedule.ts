// The maintenance Schedule (MAINTENANCE_EVERY): created by the worker as it starts, so a deployment maintains
// itself and the schedule shows in the Temporal UI with its runs. An existing schedule is left as it is: an operator
// may have paused it or changed its interval there, and every worker of a deployment starts with the same settings.
import { Client, ScheduleAlreadyRunning, type ConnectionLike } from '@temporalio/client';
import type { maintenanceWorkflow } from '../workflows/index.js';
import {
  kindSearchAttribute,
  MAINTENANCE_KIND,
  MAINTENANCE_WORKFLOW_ID_PREFIX,
  maintenanceScheduleId,
  phaseSearchAttribute,
} from '../workflows/definitions.js';
import type { WorkerConfig } from './config.js';

export interface MaintenanceScheduleOutcome {
  schedule: 'created' | 'exists' | 'off';
  scheduleId: string;
}

/** Creates the deployment's maintenance schedule unless it exists or MAINTENANCE_EVERY is off. */
export async function ensureMaintenanceSchedule(
  connection: ConnectionLike,
  config: Pick<WorkerConfig, 'taskQueue' | 'maintenance'> & { temporal: { namespace: string } },
): Promise<MaintenanceScheduleOutcome> {
  const scheduleId = maintenanceScheduleId(config.taskQueue);
  if (config.maintenance === null) return { schedule: 'off', scheduleId };
  const client = new Client({ connection, namespace: config.temporal.namespace });
  try {
    await client.schedule.create<typeof maintenanceWorkflow>({
      scheduleId,
      spec: { intervals: [{ every: config.maintenance.every }] },
      action: {
        type: 'startWorkflow',
        workflowType: 'maintenanceWorkflow',
        // Temporal appends each run's scheduled time. The schedule's id keeps two deployments' runs apart: their
        // schedules tick at the same times, and a second run under one id would fail to start every time.
        workflowId: `${MAINTENANCE_WORKFLOW_ID_PREFIX}${scheduleId}`,
        taskQueue: config.taskQueue,
        args: [{ requestedBy: `schedule ${scheduleId}` }],
        typedSearchAttributes: [
          { key: kindSearchAttribute, value: MAINTENANCE_KIND },
          { key: phaseSearchAttribute, value: 'maintaining' },
        ],
      },
      policies: {
        // A run still going (a large backlog) is not doubled by the next tick.
        overlap: 'SKIP',
        // After Temporal was down, one late run is enough; the next tick does the rest.
        catchupWindow: '1m',
      },
      state: {
        note: `created by a worker of task queue ${config.taskQueue} (MAINTENANCE_EVERY=${config.maintenance.every})`,
      },
    });
    return { schedule: 'created', scheduleId };
  } catch (error) {
    if (error instanceof ScheduleAlreadyRunning) return { schedule: 'exists', scheduleId };
    throw error;
  }
}
