/*
 * dex 1.6 -> 1.7: ALTER EXTENSION dex UPDATE TO '1.7'.
 *
 * test/t/009_upgrade.pl checks that an updated database has exactly the
 * objects of a fresh 1.7 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.7'" to load this file. \quit
