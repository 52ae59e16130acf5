// The Robot page: a robot rig's bodies in 3D (three.js), placed by the daemon's poses stream (docs/console.md).
import * as THREE from "three";
import { OrbitControls } from "/static/vendor/three/OrbitControls.js";

const view = document.getElementById("robot-view");
const bodies = [];        // { name, parent, mesh, axes }
let renderer = null, scene, camera, controls, links, info = null;

async function build() {
  info = await (await fetch("/api/robot")).json();
  if (!info.robot) return;
  document.getElementById("robot-info").textContent = `${info.robot}: ${info.bodies.length - 1} bodies`;
  scene = new THREE.Scene();
  scene.background = new THREE.Color(0xf4f6f8);
  camera = new THREE.PerspectiveCamera(45, 1, 0.01, 100);
  camera.up.set(0, 0, 1);            // MuJoCo's world is z-up
  camera.position.set(1.2, -1.2, 1.0);
  renderer = new THREE.WebGLRenderer({ antialias: true, preserveDrawingBuffer: true });
  view.append(renderer.domElement);
  controls = new OrbitControls(camera, renderer.domElement);
  controls.target.set(0, 0, 0.3);
  scene.add(new THREE.GridHelper(2, 20, 0x90a4ae, 0xcfd8dc).rotateX(Math.PI / 2));
  scene.add(new THREE.AxesHelper(0.2));
  scene.add(new THREE.HemisphereLight(0xffffff, 0x667788, 2.5));
  for (let i = 1; i < info.bodies.length; i++) {
    const mesh = new THREE.Mesh(new THREE.SphereGeometry(0.025), new THREE.MeshStandardMaterial({ color: 0x1e88e5 }));
    const axes = new THREE.AxesHelper(0.1);
    mesh.add(axes);
    scene.add(mesh);
    bodies[i] = { name: info.bodies[i], parent: info.parents[i], mesh };
  }
  links = new THREE.LineSegments(new THREE.BufferGeometry(), new THREE.LineBasicMaterial({ color: 0x263238 }));
  links.geometry.setAttribute("position", new THREE.BufferAttribute(new Float32Array(6 * info.bodies.length), 3));
  scene.add(links);
  resize();
  renderer.setAnimationLoop(() => { controls.update(); renderer.render(scene, camera); });
}

function resize() {
  if (!renderer) return;
  const w = Math.max(400, window.innerWidth - 40), h = Math.max(300, window.innerHeight - 140);
  renderer.setSize(w, h);
  camera.aspect = w / h;
  camera.updateProjectionMatrix();
}

// one poses message: world positions [m] and orientations (w, x, y, z) of every body, world first
window.addEventListener("console-poses", (e) => {
  if (!renderer) return;
  const { position: p, quaternion: q } = e.detail;
  const line = links.geometry.attributes.position;
  let k = 0;
  for (let i = 1; i < bodies.length; i++) {
    const b = bodies[i];
    b.mesh.position.set(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
    b.mesh.quaternion.set(q[4 * i + 1], q[4 * i + 2], q[4 * i + 3], q[4 * i]);
    const a = b.parent;
    line.setXYZ(k++, p[3 * a], p[3 * a + 1], p[3 * a + 2]);
    line.setXYZ(k++, p[3 * i], p[3 * i + 1], p[3 * i + 2]);
  }
  line.needsUpdate = true;
  links.geometry.setDrawRange(0, k);
});
window.addEventListener("console-page", (e) => { if (e.detail === "robot") resize(); });
window.addEventListener("resize", resize);
// read by the browser tests: a body's drawn world position [m]
window.consoleRobot = { position: (name) => { const b = bodies.find((x) => x && x.name === name); return b ? b.mesh.position.toArray() : null; },
  frames: () => (renderer ? renderer.info.render.frame : 0) };
build();
