// A logger that drops everything, for code under test that takes one and whose lines the test does not read.
import type { Logger } from '@temporalio/common';

const drop = (): void => undefined;

export const silentLogger: Logger = { log: drop, trace: drop, debug: drop, info: drop, warn: drop, error: drop };
