/*
 * dex 1.5 -> 1.6: ALTER EXTENSION dex UPDATE TO '1.6'.
 *
 * test/t/009_upgrade.pl checks that an updated database has exactly the
 * objects of a fresh 1.6 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.6'" to load this file. \quit
